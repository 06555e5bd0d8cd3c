"""Issues #6 and #9's benchmark: the C++ CPU delegate runtime (its Optimized provider on oneDNN:
by default 2 threads sharing split ops, also on 1 thread and on oneDNN's OpenMP team) vs the
XNNPACK delegate vs ONNX Runtime (issue 46's peer, `onnxruntime_peer.py`; --no-onnxruntime leaves
it out) vs eager PyTorch (and, with
--no-delegate, the same program with no delegate: ExecuTorch's kernels called by the method), on a
ResNet-shaped and a MobileNet-shaped conv-BN model at 1x3x224x224 and an MLP-BN at batch 32
(tools/lower/examples.py, size "full"), plus a 2048^3 torch.mm as the GEMM reference. Ratios are
against the CPU delegate, measured interleaved in one run; peak memory is per path, each in a
fresh process. After each table: achieved GFLOP/s per path (the model's conv/linear FLOPs over
the median) and the delegate's own memory (arena + provider-held reordered weights/scratch).

    bazel run //tools/bench:cpu_delegate_bench -- [--only resnet/full] [--size small]
        [--no-delegate] [--no-onnxruntime] [--json out.json]
        [--profile [--profile-runs N] [--profile-env ET_CPU_ONEDNN_BLOCKS=0]] [--profile-away]

``--profile [--profile-runs N]`` (`op_profile.py`, zoo_bench's profile): after each model's table,
N runs (default 10) of the CPU delegate's program in a fresh process with ``ET_CPU_PROFILE=1``:
each op's provider and share of the kernel time, summed per kernel and provider, the top ops, one
call's parts (Python's ``run_method``, the delegate's share of it, its kernels and the time
before, between and after them) and the roofline: each op's and each kernel class's (dense, 1x1,
depthwise convolution, GEMM, memory-bound) GFLOP/s against float32 ``torch.mm`` at 1024^3
measured in the same run, FLOPs from the profiled program's payload (`op_cost.py`), and the whole
call at the timed medians. The runtime runs each MobileNetV2 block (1x1 expand, depthwise, 1x1
project) as one kernel, a "fused conv chain" (under the table: which classes its FLOPs are);
``--profile-env ET_CPU_ONEDNN_BLOCKS=0`` (set in the profiled processes only, not in the timed
delegates) times the three convolutions one by one. ``--profile-away``: each op back to back and
after time away (``gc.collect()`` before every call), ours and, unless --no-onnxruntime, ONNX
Runtime's. Both go into the JSON's ``details`` too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from executorch.exir import to_edge_transform_and_lower

from tools.bench import harness, onnxruntime_peer, op_profile
from tools.bench.eager_runner import make_eager
from tools.lower.examples import get_example

BASELINE = "cpu delegate"
# The same delegate on one thread (ET_CPU_ONEDNN_THREADS=1), and with each op on oneDNN's 2-thread
# OpenMP team instead of split pieces (ET_CPU_ONEDNN_WORK_SHARING=0).
ONE_THREAD = "cpu delegate 1t"
OPENMP = "cpu delegate openmp"
_DELEGATE_ENV = {
    BASELINE: {},
    ONE_THREAD: {"ET_CPU_ONEDNN_THREADS": "1"},
    OPENMP: {"ET_CPU_ONEDNN_WORK_SHARING": "0"},
}
MODELS = ("resnet", "mobilenet", "mlp_bn")
_SIZE = ["full"]  # --size rewrites it before the benchmarks are built
_WITH_NO_DELEGATE = [False]  # --no-delegate adds the (slow) ExecuTorch-kernels-only path
_WITH_ONNXRUNTIME = [True]  # --no-onnxruntime leaves the ONNX Runtime column out
# --profile, --profile-away: profiled runs per model, back to back and after time away.
_PROFILE = [op_profile.Options()]
# Delegate memory reported by each CPU-delegate factory: (arena, provider-held) bytes.
_DELEGATE_MEMORY: dict[str, tuple[int, int]] = {}
GEMM = 2048
# The runtime does not own a loaded program's bytes (FACTS.md): keep them alive with the module.
_KEEP: list[bytes] = []


@contextmanager
def _onednn_settings(path: str) -> Iterator[None]:
    # The runtime reads its ET_CPU_ONEDNN_* settings when a delegate is initialized (first
    # forward).
    names = ("ET_CPU_ONEDNN_THREADS", "ET_CPU_ONEDNN_WORK_SHARING")
    saved = {name: os.environ.pop(name, None) for name in names}
    os.environ.update(_DELEGATE_ENV.get(path, {}))
    try:
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


def _partitioners(path: str) -> list[object]:
    if path == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner()]
    return []  # "no delegate": the method calls ExecuTorch's kernels op by op


def make_program(example: str, size: str, path: str) -> harness.Runner:
    """Exports and lowers the example for `path`, loads it on ExecuTorch's runtime, runs forward."""
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.runtime import loader

    net, inputs = op_profile.create(op_profile.EXAMPLES, example, size)
    if path in _DELEGATE_ENV:
        lowered, _ = op_profile.lower_cpu(net, inputs)  # as --profile's process lowers it
    else:
        with torch.no_grad():
            exported = torch.export.export(net, inputs)
        lowered = to_edge_transform_and_lower(exported, partitioner=_partitioners(path))
    pte = bytes(lowered.to_executorch().buffer)
    _KEEP.append(pte)
    # The memory subprocesses load the same library.
    os.environ.setdefault(loader.ENV_LIBRARY, loader.load_cpu_backend())
    module = portable_lib._load_for_executorch_from_buffer(pte)
    args = list(inputs)
    with _onednn_settings(path):
        module.forward(args)  # loads the method: the delegate's init runs here
    if path in _DELEGATE_ENV:
        arena, held = loader.last_arena_bytes(), loader.last_provider_bytes()
        if path == BASELINE:
            _DELEGATE_MEMORY[f"{example}/{size}"] = (arena, held)
        placement = loader.last_placement()
        ops = [line for line in placement if not line.startswith("Optimized(")]
        optimized = sum(1 for line in ops if "Optimized" in line)
        print(
            f"[{example}/{size}] {path}: arena {arena} bytes, provider {held} bytes; "
            f"{optimized}/{len(ops)} ops optimized (fused included)",
            file=sys.stderr,
        )
        for line in placement:
            if "declined" in line or line.startswith("Optimized("):
                print(f"  {line}", file=sys.stderr)
    return harness.executorch_runner(module, args)


def make_onnxruntime(example: str, size: str) -> harness.Runner:
    """The example exported to ONNX and run on ONNX Runtime's CPU execution provider."""
    spec = get_example(example)
    return onnxruntime_peer.make_runner(spec.model(size).eval(), spec.sample_inputs(size))


def make_mm(threads: int) -> harness.Runner:
    """A GEMM_^3 torch.mm on `threads` threads: the GFLOP/s reference."""
    a, b = torch.randn(GEMM, GEMM), torch.randn(GEMM, GEMM)

    def run() -> object:
        saved = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return torch.mm(a, b)
        finally:
            torch.set_num_threads(saved)

    return run


def model_flops(example: str, size: str) -> int:
    """FLOPs of one forward (2 per multiply-add of convolutions and matrix products)."""
    from torch.utils.flop_counter import FlopCounterMode

    spec = get_example(example)
    model, inputs = spec.model(size), spec.sample_inputs(size)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(*inputs)
    return int(counter.get_total_flops())


def benchmarks() -> list[harness.Benchmark]:
    size = _SIZE[0]
    return [
        harness.Benchmark(
            name=f"{example}/{size}",
            baseline=BASELINE,
            variants=[
                *(
                    harness.Variant(
                        path, make_program, {"example": example, "size": size, "path": path}
                    )
                    for path in (
                        BASELINE,
                        ONE_THREAD,
                        OPENMP,
                        *(["no delegate"] if _WITH_NO_DELEGATE[0] else []),
                        "xnnpack",
                    )
                ),
                *(
                    [
                        harness.Variant(
                            onnxruntime_peer.NAME,
                            make_onnxruntime,
                            {"example": example, "size": size},
                        )
                    ]
                    if _WITH_ONNXRUNTIME[0]
                    else []
                ),
                harness.Variant("eager", make_eager, {"example": example, "size": size}),
            ],
            notes=get_example(example).description
            + (f"; {onnxruntime_peer.describe()}" if _WITH_ONNXRUNTIME[0] else ""),
        )
        for example in MODELS
    ] + [
        harness.Benchmark(
            name=f"torch.mm {GEMM}^3",
            baseline="2 threads",
            variants=[
                harness.Variant(f"{n} thread{'s' if n > 1 else ''}", make_mm, {"threads": n})
                for n in (1, 2)
            ],
            notes="GEMM reference for achieved GFLOP/s",
        )
    ]


def summary(result: harness.BenchmarkResult) -> str:
    """GFLOP/s per path and the delegate's memory beside XNNPACK's peak RSS; with --profile /
    --profile-away, the model's per-op profile (`op_profile.report`)."""
    if result.name.startswith("torch.mm"):
        flops = 2 * GEMM**3
    else:
        example, size = result.name.split("/")
        flops = model_flops(example, size)
    lines = [f"  {result.name}: {flops / 1e9:.2f} GFLOP per call"]
    for v in result.variants:
        if v.median_ms:
            lines.append(f"    {v.name:<16} {flops / v.median_ms / 1e6:8.1f} GFLOP/s")
    memory = _DELEGATE_MEMORY.get(result.name)
    if memory is not None:
        arena, held = memory
        rss = {v.name: v.peak_rss_over_import_mib for v in result.variants}
        xnn = rss.get("xnnpack")
        lines.append(
            f"    delegate memory: arena {arena / 2**20:.1f} MiB + provider (reordered weights, "
            f"scratchpad, staging) {held / 2**20:.1f} MiB = {(arena + held) / 2**20:.1f} MiB; "
            f"peak RSS over import: cpu delegate {rss.get(BASELINE) or float('nan'):.1f} MiB, "
            f"xnnpack {xnn or float('nan'):.1f} MiB"
        )
    if not result.name.startswith("torch.mm"):
        lines += op_profile.report(result, op_profile.EXAMPLES, _PROFILE[0], _WITH_ONNXRUNTIME[0])
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.build_parser(__doc__ or "")
    parser.add_argument("--size", default="full", help="example size: full (default) or small")
    parser.add_argument("--no-delegate", action="store_true", help="add the no-delegate path")
    parser.add_argument(
        "--no-onnxruntime",
        action="store_true",
        help="leave ONNX Runtime out (it is timed beside XNNPACK by default)",
    )
    op_profile.add_arguments(parser)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    _PROFILE[0] = op_profile.options_from(args, parser)
    _WITH_ONNXRUNTIME[0] = not args.no_onnxruntime
    _SIZE[0] = args.size
    _WITH_NO_DELEGATE[0] = args.no_delegate
    return harness.run_main(args, benchmarks, after_each=summary)


if __name__ == "__main__":
    raise SystemExit(main())
