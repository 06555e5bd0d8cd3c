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
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from executorch.exir import to_edge_transform_and_lower

from tools.bench import harness, onnxruntime_peer
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
    if path in _DELEGATE_ENV:
        from backends.cpu.partition.cpu_partitioner import CpuPartitioner

        return [CpuPartitioner()]
    if path == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner()]
    return []  # "no delegate": the method calls ExecuTorch's kernels op by op


def make_program(example: str, size: str, path: str) -> harness.Runner:
    """Exports and lowers the example for `path`, loads it on ExecuTorch's runtime, runs forward."""
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.runtime import loader

    spec = get_example(example)
    inputs = spec.sample_inputs(size)
    with torch.no_grad():
        exported = torch.export.export(spec.model(size), inputs)
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
    """GFLOP/s per path and the delegate's memory beside XNNPACK's peak RSS."""
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
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    _WITH_ONNXRUNTIME[0] = not args.no_onnxruntime
    _SIZE[0] = args.size
    _WITH_NO_DELEGATE[0] = args.no_delegate
    return harness.run_main(args, benchmarks, after_each=summary)


if __name__ == "__main__":
    raise SystemExit(main())
