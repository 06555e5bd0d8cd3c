"""Issue #8's benchmark: every example model at its benchmark size (1x3x224x224 images, batch 32 for
the MLP) run four ways, side by side in one run: the CPU delegate, no delegate (ExecuTorch's
portable kernels), the XNNPACK delegate, and eager PyTorch. Ratios are against the CPU delegate;
"setup s" is export plus lowering (eager: building the model); peak memory is per path, each in a
fresh process.

    bazel run //tools/bench:lower_bench -- [--only resnet] [--size small] [--json out.json]
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import torch

from tools.bench import harness
from tools.lower import lowering
from tools.lower.examples import EXAMPLES, get_example
from tools.lower.runtime_check import load_program

BASELINE = "cpu delegate"
PATHS = {
    BASELINE: lowering.CPU,
    "no delegate": lowering.NO_DELEGATE,
    "xnnpack": lowering.XNNPACK,
}

_scratch = tempfile.mkdtemp(prefix="lower_bench_")
atexit.register(shutil.rmtree, _scratch, ignore_errors=True)


def make_lowered(example: str, size: str, target: str) -> harness.Runner:
    """Exports and lowers the example for ``target``, loads the .pte from a file, runs forward."""
    spec = get_example(example)
    inputs = spec.sample_inputs(size)
    with torch.no_grad():
        program = torch.export.export(spec.model(size), inputs)
    setup = lowering.target_setup(target)
    lowered = lowering.lower(program, target, setup)
    path = os.path.join(_scratch, f"{example}_{size}_{target}_{os.getpid()}.pte")
    with open(path, "wb") as f:
        f.write(lowered.pte)
    setup.prepare_runtime()
    module = load_program(path)  # from a file: the runtime owns the bytes
    args = list(inputs)
    return lambda: module.forward(args)


def make_eager(example: str, size: str) -> harness.Runner:
    spec = get_example(example)
    model, inputs = spec.model(size), spec.sample_inputs(size)

    def run() -> object:
        with torch.no_grad():
            return model(*inputs)

    return run


def _size_from_argv() -> str:
    # --size is ours; everything else goes to the harness.
    if "--size" in sys.argv:
        i = sys.argv.index("--size")
        size = sys.argv[i + 1] if i + 1 < len(sys.argv) else ""
        del sys.argv[i : i + 2]
        if size not in ("small", "full"):
            raise SystemExit(f"lower_bench: --size must be small or full, got {size!r}")
        return size
    return "full"


SIZE = "full"


def benchmarks() -> list[harness.Benchmark]:
    out = []
    for name in EXAMPLES:
        variants = [
            harness.Variant(label, make_lowered, {"example": name, "size": SIZE, "target": t})
            for label, t in PATHS.items()
        ]
        variants.append(harness.Variant("eager", make_eager, {"example": name, "size": SIZE}))
        shape = " x ".join(str(list(x.shape)) for x in get_example(name).sample_inputs(SIZE))
        out.append(
            harness.Benchmark(
                name=name,
                variants=variants,
                baseline=BASELINE,
                notes=f"{get_example(name).description}; {SIZE} size, inputs {shape}; "
                f"torch threads {torch.get_num_threads()}",
            )
        )
    return out


if __name__ == "__main__":
    SIZE = _size_from_argv()
    raise SystemExit(
        harness.main(
            benchmarks,
            description=__doc__.split("\n\n")[0] + " (extra option: --size small|full)",
        )
    )
