"""Smoke test: a C++ backend built against the wheel registers with the ExecuTorch runtime."""

import ctypes
import os

from executorch.extension.pybindings import portable_lib


def _library_path() -> str:
    path = os.environ["SMOKE_BACKEND_SO"]
    runfiles = os.environ.get("RUNFILES_DIR") or os.getcwd()
    candidate = os.path.join(runfiles, "et_cpu_plugin", path)
    return candidate if os.path.exists(candidate) else os.path.abspath(path)


def test_backend_registers_with_the_wheel_runtime() -> None:
    before = set(portable_lib._get_registered_backend_names())
    assert "EtCpuPluginSmokeBackend" not in before
    ctypes.CDLL(_library_path(), mode=ctypes.RTLD_GLOBAL)
    after = set(portable_lib._get_registered_backend_names())
    assert "EtCpuPluginSmokeBackend" in after
