"""Issue #8's benchmark: every example model at its benchmark size (1x3x224x224 images, batch 32 for
the MLP) run four ways, side by side in one run: the CPU delegate, no delegate (ExecuTorch's
portable kernels), the XNNPACK delegate, and eager PyTorch. Ratios are against the CPU delegate;
"setup s" is export plus lowering (eager: building the model); peak memory is per path, each in a
fresh process.

    bazel run //tools/bench:lower_bench -- [--only resnet] [--size small] [--threads 1] [--json F]

The memory subprocesses do not inherit --threads (peak memory hardly depends on it).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import torch

from tools.bench import harness
from tools.bench.eager_runner import make_eager
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
    module = load_program(path)  # holds its verified bytes for as long as it lives
    args = list(inputs)
    return lambda: module.forward(args)


def _take_option(flag: str) -> str | None:
    # Our own options; everything else goes to the harness.
    if flag not in sys.argv:
        return None
    i = sys.argv.index(flag)
    value = sys.argv[i + 1] if i + 1 < len(sys.argv) else ""
    del sys.argv[i : i + 2]
    return value


def _configure_from_argv() -> str:
    """Applies --threads N (eager and ExecuTorch's threadpool) and returns --size (default full)."""
    size = _take_option("--size") or "full"
    if size not in ("small", "full"):
        raise SystemExit(f"lower_bench: --size must be small or full, got {size!r}")
    threads = _take_option("--threads")
    if threads is not None:
        if not threads.isdigit() or int(threads) < 1:
            raise SystemExit(f"lower_bench: --threads must be a positive integer, got {threads!r}")
        from tools.lower.pipeline import set_threads

        set_threads(int(threads))
    return size


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
    SIZE = _configure_from_argv()
    raise SystemExit(
        harness.main(
            benchmarks,
            description=__doc__.split("\n\n")[0]
            + " (extra options: --size small|full, --threads N)",
        )
    )
