"""Issue #6's benchmark: the C++ CPU delegate runtime vs the same program with no delegate
(ExecuTorch's kernels called directly by the method), vs the XNNPACK delegate, vs eager PyTorch, on
a ResNet-shaped and a MobileNet-shaped conv-BN model at 1x3x224x224 and an MLP-BN at batch 32
(tools/lower/examples.py, size "full"). Ratios are against the CPU delegate, measured interleaved in
one run; peak memory is per path, each in a fresh process. The CPU delegate's intermediate-arena
size (after lifetime reuse) is printed to stderr when it is set up.

    bazel run //tools/bench:cpu_delegate_bench -- [--only resnet] [--size small] [--json out.json]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import torch
from executorch.exir import to_edge_transform_and_lower

from tools.bench import harness
from tools.lower.examples import get_example

BASELINE = "cpu delegate"
MODELS = ("resnet", "mobilenet", "mlp_bn")
_SIZE = ["full"]  # --size rewrites it before the benchmarks are built
# The runtime does not own a loaded program's bytes (FACTS.md): keep them alive with the module.
_KEEP: list[bytes] = []


def _partitioners(path: str) -> list[object]:
    if path == BASELINE:
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
    module.forward(args)  # loads the method: the delegate's init runs here
    if path == BASELINE:
        arena = loader.last_arena_bytes()
        print(f"[{example}/{size}] CPU delegate arena: {arena} bytes", file=sys.stderr)
    return lambda: module.forward(args)


def make_eager(example: str, size: str) -> harness.Runner:
    spec = get_example(example)
    model, inputs = spec.model(size), spec.sample_inputs(size)

    def run() -> object:
        with torch.no_grad():
            return model(*inputs)

    return run


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
                    for path in (BASELINE, "no delegate", "xnnpack")
                ),
                harness.Variant("eager", make_eager, {"example": example, "size": size}),
            ],
            notes=get_example(example).description,
        )
        for example in MODELS
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--size" in args:  # ours, not the harness's
        at = args.index("--size")
        _SIZE[0] = args[at + 1]
        del args[at : at + 2]
    return harness.main(benchmarks, args, description=__doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main())
