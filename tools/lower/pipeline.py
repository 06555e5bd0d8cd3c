"""The lowering tool's steps in order: get the program, lower it, write the `.pte`, run it on the
ExecuTorch runtime, check it against eager, time it beside the alternatives, build the report."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tools.bench import harness
from tools.lower import lowering, profile_chart, program_facts, quantize, size_check
from tools.lower.errors import ExitCode, LowerError
from tools.lower.profiling import ProfilePaths, profile_program
from tools.lower.program_io import SourceProgram, export_example, load_pt2
from tools.lower.report import PathTiming, Report
from tools.lower.runtime_check import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    compare_outputs,
    load_program,
    run_eager,
    run_program,
)

Progress = Callable[[str], None]

EAGER = "eager"


_DEFAULT_GROUP_SIZE = quantize.DEFAULT_GROUP_SIZE


@dataclass(frozen=True)
class Request:
    """What the user asked for; paths are already absolute."""

    output: str
    model_path: str | None = None
    example: str | None = None
    size: str = "small"
    target: str = lowering.CPU
    compare: bool = False
    runs: int = 10
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    # Run with ETDump too; the ETDump, ETRecord and chart go beside the .pte.
    profile: bool = False
    profile_runs: int = 10
    # "ptq" / "qat": lower the PT2E int8 version of the model; "8da4w" / "int8wo": its linears
    # quantized with torchao (tools/lower/quantize.py), 8da4w in groups of `group_size`.
    quantize: str = "none"
    group_size: int = _DEFAULT_GROUP_SIZE
    # Run the .pte at sizes within its dynamic dimensions' bounds (tools/lower/size_check.py).
    check_sizes: bool = False


def check_output_path(path: str) -> None:
    """Fails early, before minutes of lowering, when the `.pte` could not be written."""
    if os.path.isdir(path):
        raise LowerError(ExitCode.BAD_INPUT, f"{path}: is a directory, expected a .pte file path")
    parent = os.path.dirname(path) or "."
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise LowerError(ExitCode.BAD_INPUT, f"{path}: cannot write: {parent} is not a directory")
    if not os.path.isdir(parent):
        raise LowerError(ExitCode.BAD_INPUT, f"{path}: cannot write: {parent} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise LowerError(ExitCode.BAD_INPUT, f"{path}: cannot write: permission denied")


def write_pte(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as exc:
        raise LowerError(ExitCode.BAD_INPUT, f"{path}: cannot write: {exc.strerror}") from None


def get_source(request: Request, say: Progress) -> tuple[SourceProgram, float]:
    started = time.perf_counter()
    if request.model_path is not None:
        say(f"loading {request.model_path}")
        source = load_pt2(request.model_path)
    else:
        name = request.example or "resnet"
        say(f"exporting example {name} ({request.size})")
        source = export_example(name, request.size)
    return source, time.perf_counter() - started


def set_threads(count: int) -> None:
    """Same thread count for eager PyTorch and ExecuTorch's threadpool (used by XNNPACK)."""
    from executorch.extension.pybindings import portable_lib

    torch.set_num_threads(count)
    portable_lib._unsafe_reset_threadpool(count)


def _loaded_runner(module: Any, inputs: tuple[torch.Tensor, ...]) -> harness.Runner:
    args = list(inputs)
    return lambda: module.forward(args)


def _eager_runner(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> harness.Runner:
    def run() -> object:
        with torch.no_grad():
            return model(*inputs)

    return run


def run(request: Request, say: Progress) -> tuple[Report, ExitCode]:
    """Runs every step; raises LowerError for a failure the user can act on."""
    check_output_path(request.output)
    profile_paths = ProfilePaths.beside(request.output)
    if request.profile:
        for path in (profile_paths.etdump, profile_paths.etrecord, profile_paths.chart):
            check_output_path(path)
    source, export_s = get_source(request, say)
    float_model = None
    atol = request.atol
    if request.quantize in ("ptq", "qat"):
        how = "calibrated on" if request.quantize == "ptq" else "QAT steps on"
        say(f"quantizing (PT2E int8, {how} the sample inputs)")
        source, float_model = quantize.quantize_source(source, request.quantize)
        # The int8 kernels and the quantized reference may round an output one step apart.
        atol = max(atol, 1.001 * (quantize.output_step(source.program) or 0.0))
    torchao_summary = None
    if request.quantize in quantize.TORCHAO_MODES:
        say(f"quantizing the linears with torchao ({request.quantize})")
        source, float_model, torchao_summary = quantize.quantize_torchao(
            source, request.quantize, request.group_size
        )
    expected = run_eager(source.eager, source.inputs)
    if torchao_summary is not None:
        atol = max(atol, quantize.dynamic_activation_step(expected))

    title = lowering.TARGET_TITLES[request.target]
    say(f"lowering for the {title}")
    setup = lowering.target_setup(request.target)
    lowered = lowering.lower(source.program, request.target, setup, etrecord=request.profile)
    write_pte(request.output, lowered.pte)
    say(f"wrote {request.output} ({len(lowered.pte)} bytes); running it on the ExecuTorch runtime")
    setup.prepare_runtime()
    module = load_program(request.output)
    actual = run_program(module, source.inputs, request.output)
    # After the first run: the runtime may initialise delegates lazily.
    lowered.delegate_details.update(setup.runtime_details())
    checks = compare_outputs(actual, expected, atol, request.rtol)

    report = Report(
        source=source.label,
        target=request.target,
        output_path=request.output,
        inputs_origin=source.inputs_origin,
        export_s=export_s,
        lowering_s=lowered.lowering_s,
        delegation=lowered.delegation,
        batch_norms_before=program_facts.count_batch_norms(source.program.graph_module),
        batch_norms_left=lowered.batch_norms_left,
        constant_bytes=program_facts.constant_bytes(source.program),
        pte_bytes=len(lowered.pte),
        atol=atol,
        rtol=request.rtol,
        checks=checks,
        delegate_details=lowered.delegate_details,
    )
    if request.check_sizes:
        say("checking the .pte at several sizes within its dynamic dimensions' bounds")
        report.size_checks = size_check.check_sizes(
            source.program, module, source.eager, source.inputs, atol, request.rtol, request.output
        )
    if torchao_summary is not None:
        report.quantization = torchao_summary.describe()
        report.float_constant_bytes = torchao_summary.float_constant_bytes
    if float_model is not None:
        report.sqnr_db = quantize.sqnr_db(actual, run_eager(float_model, source.inputs))

    if request.runs > 0:
        _time_paths(request, source, module, lowered, report, say)
    if request.profile:
        say(f"profiling: {request.profile_runs} run(s) with ETDump")
        report.profile = profile_program(
            request.output, source.inputs, request.profile_runs, lowered.etrecord, profile_paths
        )
        chart = profile_chart.render_svg(report.profile, f"{source.label} on the {title}")
        try:
            with open(profile_paths.chart, "w", encoding="utf-8") as f:
                f.write(chart)
        except OSError as exc:
            raise LowerError(
                ExitCode.BAD_INPUT, f"{profile_paths.chart}: cannot write: {exc.strerror}"
            ) from None
        say(f"wrote {profile_paths.etdump}, {profile_paths.etrecord} and {profile_paths.chart}")
    return report, ExitCode.OK if report.matches_eager else ExitCode.MISMATCH


def _time_paths(
    request: Request,
    source: SourceProgram,
    module: Any,
    lowered: lowering.Lowered,
    report: Report,
    say: Progress,
) -> None:
    primary = lowering.TARGET_TITLES[request.target]
    runners: dict[str, harness.Runner] = {primary: _loaded_runner(module, source.inputs)}
    rows: dict[str, PathTiming] = {
        primary: PathTiming(
            name=primary,
            median_ms=None,
            samples=0,
            ratio_to_primary=None,
            lowering_s=lowered.lowering_s,
            pte_bytes=len(lowered.pte),
            delegated_ops=lowered.delegation.delegated_count,
            not_delegated_ops=lowered.delegation.not_delegated_count,
            matches_eager=report.matches_eager,
        )
    }
    keep: list[Any] = []  # loaded modules must outlive their runners
    others = [t for t in (lowering.XNNPACK, lowering.NO_DELEGATE) if t != request.target]
    with tempfile.TemporaryDirectory(prefix="lower_compare_") as scratch:
        for target in others if request.compare else []:
            title = lowering.TARGET_TITLES[target]
            say(f"compare: lowering with {title}")
            try:
                other_setup = lowering.target_setup(target)
                other = lowering.lower(source.program, target, other_setup)
                path = os.path.join(scratch, f"{target}.pte")
                write_pte(path, other.pte)
                other_setup.prepare_runtime()
                other_module = load_program(path)
                outputs = run_program(other_module, source.inputs, path)
            except LowerError as exc:
                rows[title] = PathTiming(title, None, 0, None, error=exc.message)
                continue
            keep.append(other_module)
            runners[title] = _loaded_runner(other_module, source.inputs)
            checks = compare_outputs(outputs, run_eager(source.eager, source.inputs))
            rows[title] = PathTiming(
                name=title,
                median_ms=None,
                samples=0,
                ratio_to_primary=None,
                lowering_s=other.lowering_s,
                pte_bytes=len(other.pte),
                delegated_ops=other.delegation.delegated_count,
                not_delegated_ops=other.delegation.not_delegated_count,
                matches_eager=all(c.ok for c in checks),
            )
        runners[EAGER] = _eager_runner(source.eager, source.inputs)
        rows[EAGER] = PathTiming(EAGER, None, 0, None)

        say(f"timing {len(runners)} path(s), {request.runs} interleaved round(s)")
        benchmark = harness.Benchmark(
            name=source.label,
            baseline=primary,
            variants=[harness.Variant(name, _constant_factory(r)) for name, r in runners.items()],
        )
        options = harness.Options(
            repeats=request.runs, warmup=1, min_repeats=3, budget_s=10.0, memory=False
        )
        result = harness.run_benchmark(benchmark, options, say)
    for v in result.variants:
        row = rows[v.name]
        row.median_ms = v.median_ms
        row.samples = len(v.samples_ms)
        row.ratio_to_primary = v.ratio_to_baseline
        if v.error:
            row.error = v.error
    ordered = [rows[primary]] + [rows[n] for n in rows if n != primary]
    report.timings = ordered
    report.load_average = result.load_after
    report.threads = torch.get_num_threads()
    del keep


def _constant_factory(runner: harness.Runner) -> harness.Factory:
    return lambda: runner
