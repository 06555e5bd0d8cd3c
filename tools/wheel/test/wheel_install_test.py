"""The et_cpu_plugin wheel installs with pip into a fresh virtualenv and works there: a small CNN
and an integer model lowered with the installed CpuPartitioner run on the installed runtime
library and match eager, and README.md's "Use it from Python" snippet runs as written.

The fresh virtualenv gets torch and executorch (and their dependencies) from the pinned
environment that Bazel built from requirements.lock, through a `.pth` line naming that
environment's site-packages: the same files a `pip install -r requirements.lock` gives, without
copying 1.9 GB per test run. Nothing of this checkout is on its path (PYTHONPATH and Bazel's
runfiles variables are removed), pip installs the wheel with `--no-index` and resolves its
dependencies against what the `.pth` shows, so a pin that differs from the lock fails the install.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools.wheel.build_wheel import WheelError, rewrite_imports

HERE = Path(__file__).absolute().parent
REPO = HERE.parents[2]  # the workspace root in the runfiles tree
# Variables through which the checkout (or its runfiles) could reach the installed code.
_SCRUBBED = ("PYTHONPATH", "BUILD_WORKING_DIRECTORY", "RUNFILES_DIR", "TEST_SRCDIR")
_SCRUBBED_PREFIXES = ("PIP_", "PYTHON_RUNFILES", "RUNFILES_", "ET_CPU_")


@dataclass(frozen=True)
class Venv:
    root: Path
    wheel: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"


def _run(command: list[str | Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)
    }
    env["PIP_CONFIG_FILE"] = os.devnull
    return subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def _built_wheel() -> Path:
    wheels = sorted((REPO / "tools" / "wheel").glob("et_cpu_plugin-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {REPO / 'tools' / 'wheel'}: {wheels}"
    return wheels[0]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    root = tmp_path_factory.mktemp("venv")
    work = tmp_path_factory.mktemp("work")
    created = _run([sys.executable, "-m", "venv", "--without-pip", root], cwd=work)
    assert created.returncode == 0, created.stderr
    site = _run(
        [root / "bin" / "python", "-c", "import site; print(site.getsitepackages()[0])"], work
    )
    pinned = sysconfig.get_paths()["purelib"]  # the environment built from requirements.lock
    (Path(site.stdout.strip()) / "pinned_environment.pth").write_text(pinned + "\n")
    wheel = _built_wheel()
    pip: list[str | Path] = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    done = _run([*pip, "--python", root / "bin" / "python", "install", "--no-index", wheel], work)
    assert done.returncode == 0, done.stdout + done.stderr
    return Venv(root=root, wheel=wheel)


def test_wheel_holds_the_packages_the_library_and_the_lock_pins() -> None:
    wheel = zipfile.ZipFile(_built_wheel())
    names = set(wheel.namelist())
    for required in (
        "et_cpu_plugin/__init__.py",
        "et_cpu_plugin/backends/cpu/partition/cpu_partitioner.py",
        "et_cpu_plugin/backends/cpu/cpu_backend.py",
        "et_cpu_plugin/backends/transforms/fuse_batch_norm_with_conv.py",
        "et_cpu_plugin/backends/cpu/serialization/schema_generated.py",
        "et_cpu_plugin/backends/cpu/runtime/loader.py",
        "et_cpu_plugin/backends/cpu/runtime/libcpu_backend.so",
    ):
        assert required in names, required
    assert not [n for n in names if "/test/" in n or n.endswith("_test.py")]
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    requires = re.findall(r"^Requires-Dist: (\S+)$", wheel.read(metadata).decode(), re.MULTILINE)
    lock = (REPO / "third_party" / "python" / "requirements.lock").read_text()
    for requirement in requires:
        assert re.search(rf"^{re.escape(requirement)} ", lock, re.MULTILINE), requirement
    assert {r.split("==")[0] for r in requires} >= {"torch", "executorch"}


def test_nothing_of_the_checkout_is_importable(venv: Venv, tmp_path: Path) -> None:
    probe = (
        "import importlib.util as u, et_cpu_plugin; "
        "print(et_cpu_plugin.__file__, u.find_spec('backends'))"
    )
    proc = _run([venv.python, "-c", probe], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    package, backends = proc.stdout.split()
    assert package.startswith(str(venv.root)), package
    assert backends == "None"


def test_installed_package_lowers_and_runs_models_like_eager(venv: Venv, tmp_path: Path) -> None:
    proc = _run([venv.python, HERE / "installed_models.py", tmp_path], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    where, *models = lines
    assert where["library"].startswith(str(venv.root)), where  # the wheel's copy, not Bazel's
    assert [m["model"] for m in models] == ["small_cnn", "integer_model"]
    for model in models:
        assert model["left_out"] == [] and model["ops_outside_delegate"] == [], model
        assert model["outputs"] and all(o["matches_eager"] for o in model["outputs"]), model
    assert {o["dtype"] for o in models[1]["outputs"]} == {
        "torch.int64",
        "torch.int32",
        "torch.bool",
    }


def readme_python_snippet(readme: str) -> str:
    """The first ```python block of README.md's "## Use it from Python" section."""
    section = re.search(r"^## Use it from Python\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    assert section, 'README.md has no "## Use it from Python" section'
    block = re.search(r"^```python\n(.*?)^```", section.group(1), re.M | re.S)
    assert block, 'README.md\'s "Use it from Python" section has no ```python block'
    return block.group(1)


def test_readme_snippet_runs_as_written(venv: Venv, tmp_path: Path) -> None:
    snippet = readme_python_snippet((REPO / "README.md").read_text())
    (tmp_path / "snippet.py").write_text(snippet)
    proc = _run([venv.python, "snippet.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(tmp_path.glob("*.pte")), "the snippet saved no .pte"


def test_an_import_the_build_cannot_move_is_an_error() -> None:
    moved = rewrite_imports("from backends.cpu import routes\n", "backends", "pkg.backends", "m.py")
    assert moved == "from pkg.backends.cpu import routes\n"
    with pytest.raises(WheelError, match=r"m\.py:2: import of 'backends\.cpu' left unrewritten"):
        rewrite_imports("import os\nimport backends.cpu\n", "backends", "pkg.backends", "m.py")
