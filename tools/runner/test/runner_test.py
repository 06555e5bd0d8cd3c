"""The C++ runner (//tools/runner) against the Python runtime: `.pte` files written by
`tools/lower`'s command (a float and an integer example) give the same outputs in the runner as
in ExecuTorch's Python bindings with the delegate loaded; bad invocations get one error line and
the documented exit code; ETDump is written with the delegate's per-op events."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from executorch.exir import to_edge
from executorch.extension.pybindings import portable_lib

from backends.cpu.runtime import loader
from tools.lower.main import main as lower_main

REPO = Path(__file__).absolute().parents[3]  # the workspace root in the runfiles tree
RUNNER = REPO / "tools" / "runner" / "runner"
_DTYPES = {"float32": torch.float32, "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}


@dataclass(frozen=True)
class Lowered:
    pte: Path
    inputs: list[torch.Tensor]


def _runner(*args: str | Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "BUILD_WORKING_DIRECTORY"}
    environment.update(env)
    return subprocess.run(
        [str(RUNNER), *map(str, args)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )


def _lower_example(name: str, out_dir: Path) -> Path:
    """`bazel run //tools/lower -- --example NAME -o NAME.pte`, in this process (one interpreter
    start-up less per example)."""
    pte = out_dir / f"{name}.pte"
    assert lower_main(["--example", name, "-o", str(pte), "--runs", "0", "--quiet"]) == 0
    return pte


def _inputs_for(pte: Path, seed: int) -> list[torch.Tensor]:
    """Inputs of the declared dtypes and shapes (from the runner's own report); integer inputs
    are distinct small values, valid as indices of the example's first input."""
    proc = _runner(pte, "--json", "--iterations", "1")
    assert proc.returncode == 0, proc.stderr
    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for spec in json.loads(proc.stdout)["inputs"]:
        dtype, shape = _DTYPES[spec["dtype"]], spec["shape"]
        if dtype.is_floating_point:
            inputs.append(torch.randn(shape, generator=generator, dtype=dtype))
        else:
            count = int(torch.tensor(shape).prod())
            inputs.append(torch.randperm(count, generator=generator).reshape(shape).to(dtype))
    return inputs


@pytest.fixture(scope="module")
def lowered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Lowered]:
    out_dir = tmp_path_factory.mktemp("pte")
    programs = {}
    for name in ("resnet", "index"):
        pte = _lower_example(name, out_dir)
        programs[name] = Lowered(pte=pte, inputs=_inputs_for(pte, seed=3))
    return programs


def _python_outputs(pte: Path, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    loader.load_cpu_backend()
    module = portable_lib._load_for_executorch(str(pte))
    return list(module.forward(inputs))


@pytest.mark.parametrize("name", ["resnet", "index"])
def test_runner_outputs_equal_the_python_runtime(
    lowered: dict[str, Lowered], name: str, tmp_path: Path
) -> None:
    program = lowered[name]
    files = []
    for i, tensor in enumerate(program.inputs):
        path = tmp_path / f"input_{i}.bin"
        path.write_bytes(tensor.contiguous().numpy().tobytes())
        files.append(str(path))
    proc = _runner(
        program.pte,
        "--inputs",
        ",".join(files),
        "--outputs",
        tmp_path,
        "--json",
        "--iterations",
        "3",
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["backends"] == "CpuBackend"
    assert len(report["latency_ms"]["runs"]) == 3
    expected = _python_outputs(program.pte, program.inputs)
    assert len(report["outputs"]) == len(expected)
    for i, (want, summary) in enumerate(zip(expected, report["outputs"], strict=True)):
        assert summary["shape"] == list(want.shape) and _DTYPES[summary["dtype"]] == want.dtype
        raw = bytearray((tmp_path / f"output_{i}.bin").read_bytes())
        got = torch.frombuffer(raw, dtype=want.dtype).reshape(want.shape) if raw else want[:0]
        if want.is_floating_point():
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
            assert summary["sum"] == pytest.approx(float(want.double().sum()), rel=1e-5, abs=1e-5)
        else:
            assert torch.equal(got, want), (i, got, want)
            assert summary["sum"] == float(want.double().sum())


def test_random_inputs_are_seeded_and_the_text_report_is_complete(
    lowered: dict[str, Lowered],
) -> None:
    first = _runner(lowered["index"].pte, "--seed", "7", "--iterations", "2")
    again = _runner(lowered["index"].pte, "--seed", "7", "--iterations", "2")
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    sums = [line for line in first.stdout.splitlines() if line.startswith("output ")]
    assert sums == [line for line in again.stdout.splitlines() if line.startswith("output ")]
    assert len(sums) == 4 and "input 1: int64[4] random (seed 7)" in first.stdout
    assert "latency: load " in first.stdout and "over 2 iterations" in first.stdout
    assert first.stderr == ""  # the runtime's log lines are hidden without --verbose


def test_relative_paths_resolve_against_the_bazel_run_directory(
    lowered: dict[str, Lowered], tmp_path: Path
) -> None:
    pte = lowered["resnet"].pte
    proc = _runner(
        pte.name,
        "--etdump",
        "out.etdp",
        "--iterations",
        "2",
        cwd=tmp_path,
        BUILD_WORKING_DIRECTORY=str(pte.parent),
    )
    assert proc.returncode == 0, proc.stderr
    etdump = pte.parent / "out.etdp"
    assert etdump.stat().st_size > 0
    from executorch.devtools import Inspector

    inspector = Inspector(etdump_path=str(etdump))
    names = {event.name for block in inspector.event_blocks for event in block.events}
    assert any(n.endswith("(Optimized)") for n in names), sorted(names)[:20]


def _program_without_delegate(path: Path) -> Path:
    class Add(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    program = to_edge(torch.export.export(Add(), (torch.ones(2),))).to_executorch()
    path.write_bytes(program.buffer)
    return path


def _one_error_line(proc: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("runner: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert proc.stdout == ""


def test_bad_invocations_get_one_line_and_the_documented_exit_code(
    lowered: dict[str, Lowered], tmp_path: Path
) -> None:
    pte = lowered["resnet"].pte
    _one_error_line(_runner(tmp_path / "missing.pte"), 2, "no such program file", "missing.pte")
    garbage = tmp_path / "garbage.pte"
    garbage.write_bytes(b"not a program at all" * 10)
    _one_error_line(_runner(garbage), 3, "is not an ExecuTorch program")
    plain = _program_without_delegate(tmp_path / "plain.pte")
    _one_error_line(_runner(plain), 3, "has no CpuBackend delegate", "backends: none")
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 12)
    _one_error_line(
        _runner(pte, "--inputs", short), 2, "input 0:", "has 12 bytes", "float32[1, 3, 32, 32]"
    )
    _one_error_line(_runner(pte, "--inputs", f"{short},{short}"), 2, "2 files for 1 inputs")
    _one_error_line(_runner(pte, "--inputs", tmp_path / "nope.bin"), 2, "no such input file")
    _one_error_line(_runner(pte, "--iterations", "0"), 2, "--iterations")
    _one_error_line(_runner(pte, "--bogus"), 2, "unknown option --bogus")
    _one_error_line(_runner(pte, "--method", "backward"), 2, "no method 'backward'", "forward")


def test_damaged_files_that_crash_executorch_unverified_are_refused() -> None:
    """tools/pte_fuzz/upstream/ holds files that crash the process inside ExecuTorch when it
    loads them without its program verifier (Module's default); the runner verifies first."""
    reproducers = sorted((REPO / "tools" / "pte_fuzz" / "upstream").glob("*.pte"))
    assert len(reproducers) >= 10
    for pte in reproducers:
        _one_error_line(_runner(pte, "--iterations", "1"), 3, str(pte))
    # It passes the verifier; the damaged backend id is printed escaped, not as raw bytes.
    damaged_id = REPO / "tools" / "pte_fuzz" / "upstream" / "backend_id_not_utf8.pte"
    _one_error_line(_runner(damaged_id), 3, "has no CpuBackend delegate", "\\x")


def test_help_is_complete() -> None:
    proc = _runner("--help")
    assert proc.returncode == 0
    for option in ("--inputs", "--iterations", "--etdump", "--outputs", "--json", "--seed"):
        assert option in proc.stdout
    assert "exit codes:" in proc.stdout and "BUILD_WORKING_DIRECTORY" in proc.stdout
