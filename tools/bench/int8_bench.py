"""Issue 18's benchmark: PT2E int8 programs on the CPU delegate (oneDNN int8 kernels) vs XNNPACK
int8, with our int8 on a 2-thread OpenMP team ("cpu int8 omp2"), with its convolutions and linears
whole on one thread ("cpu int8 whole", ET_CPU_ONEDNN_INT8_SPLIT=0: the A/B of the row / column
bands on the work pool) and with quantize/dequantize on ExecuTorch's portable kernels ("cpu int8
portable q/dq", ET_CPU_ONEDNN_QUANTIZE_LOOPS=0), XNNPACK fp32 and our fp32 beside them, on the
ResNet-18-, MobileNetV2-shaped and MLP-BN examples (`tools/lower/examples.py`, full size by
default). One run, interleaved; ratios are against XNNPACK int8 (so "cpu int8" at or below 1.0x
is the issue's target); peak memory per variant in a fresh process. Quantization:
`backends.cpu.quantization.quantize_ptq` (XNNPACK's symmetric per-channel config) calibrated on 4
seeded sample inputs; every int8 variant lowers the same quantized model. Under each table: the
ops the CPU partitioner left out (none expected); with ``--agreement N``, also issue 18's
correctness figures: our int8 outputs against the same quantized program without a delegate on N
inputs (share equal, worst distance in output quantization steps) and their SQNR vs eager float.

    ./bazelw run //tools/bench:int8_bench -- [--size small] [--only resnet/full] [--repeats 10]
                                              [--no-memory] [--agreement 4] [--json out.json]
"""

from __future__ import annotations

import collections
import functools
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch

from tools.bench import harness

BASELINE = "xnnpack int8"
CPU_INT8 = "cpu int8"
# The same program with its int8 kernels on an OpenMP team of 2 (ET_CPU_ONEDNN_INT8_THREADS, read
# when the delegate binds them): whether a team beats one thread on this machine, side by side.
CPU_INT8_OMP2 = "cpu int8 omp2"
CPU_INT8_WHOLE = "cpu int8 whole"
# Quantize/dequantize on ExecuTorch's portable kernels instead of our loops.
CPU_INT8_PORTABLE_QDQ = "cpu int8 portable q/dq"
XNNPACK_FP32 = "xnnpack fp32"
CPU_FP32 = "cpu fp32"
MODELS = ("resnet", "mobilenet", "mlp_bn")
CALIBRATION_SAMPLES = 4
_SIZE = ["full"]  # --size rewrites it before the benchmarks are built
_LEFT_OUT: dict[str, dict[str, int]] = {}  # benchmark name -> "op (reason)" -> count
_KEEP: list[bytes] = []  # the runtime does not own a loaded program's bytes
_AGREEMENT_INPUTS = [0]  # --agreement N: inputs per model for the correctness figures (0: off)
_INT8_THREADS = "ET_CPU_ONEDNN_INT8_THREADS"
_INT8_SPLIT = "ET_CPU_ONEDNN_INT8_SPLIT"
# The environment a variant's delegate binds its int8 kernels under (read in its init).
_VARIANT_ENV: dict[str, dict[str, str]] = {
    CPU_INT8_OMP2: {_INT8_THREADS: "2"},
    CPU_INT8_WHOLE: {_INT8_SPLIT: "0"},
    CPU_INT8_PORTABLE_QDQ: {"ET_CPU_ONEDNN_QUANTIZE_LOOPS": "0"},
}


@functools.cache
def lower(model: str, size: str, variant: str) -> tuple[bytes, tuple[torch.Tensor, ...]]:
    """The example `model` lowered for `variant` (one of the four names above): .pte bytes and
    the inputs it runs on. Lowered once per process: the int8 variants that differ only in their
    environment at init, and the agreement figures, run the one "cpu int8" program."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from backends.cpu.partition.cpu_partitioner import CpuPartitioner
    from tools.lower.examples import get_example

    example = get_example(model)
    net = example.model(size).eval()
    inputs = example.sample_inputs(size)
    if variant.endswith("int8"):
        net = _quantized(model, size, net)
    with torch.no_grad():
        exported = torch.export.export(net, inputs)
    if variant.startswith("cpu"):
        partitioner = CpuPartitioner()
        edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
        _LEFT_OUT[f"{model}/{size}"] = dict(
            collections.Counter(f"{n.op} ({n.reason.value})" for n in partitioner.report.left_out)
        )
    else:
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    return bytes(edge.to_executorch().buffer), inputs


def _quantized(model: str, size: str, net: torch.nn.Module) -> torch.nn.Module:
    """`net` (the example `model`) quantized the way every int8 variant lowers it."""
    from backends.cpu.quantization import quantize_ptq
    from tools.lower.examples import get_example

    example = get_example(model)
    samples = [example.sample_inputs(size, seed=s) for s in range(CALIBRATION_SAMPLES)]
    return quantize_ptq(net, samples)


def agreement(model: str, size: str, inputs: int) -> dict[str, Any]:
    """Issue 18's correctness figures on the example `model`: our int8 delegate against the same
    quantized program without a delegate (ExecuTorch's quantized kernels) on `inputs` seeded
    inputs, in quantization steps of the output; and the SQNR of our int8 against eager float."""
    from executorch.exir import to_edge
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.quantization import StepAgreement, output_step
    from backends.cpu.runtime import loader
    from tools.lower.examples import get_example
    from tools.lower.quantize import sqnr_db

    example = get_example(model)
    float_net = example.model(size).eval()
    quantized = _quantized(model, size, example.model(size).eval())
    with torch.no_grad():
        exported = torch.export.export(quantized, example.sample_inputs(size))
    step = output_step(exported)
    os.environ.setdefault(loader.ENV_LIBRARY, loader.load_cpu_backend())
    programs = []
    # The delegated program is the "cpu int8" variant's (the same quantized model, lowered once).
    for pte in (lower(model, size, CPU_INT8)[0], bytes(to_edge(exported).to_executorch().buffer)):
        _KEEP.append(pte)
        programs.append(portable_lib._load_for_executorch_from_buffer(pte))
    delegated, reference = programs
    measured = StepAgreement()
    ours: list[torch.Tensor] = []
    eager: list[torch.Tensor] = []
    for seed in range(CALIBRATION_SAMPLES, CALIBRATION_SAMPLES + inputs):
        args = example.sample_inputs(size, seed=seed)
        got = delegated.forward(list(args))[0]
        measured.add(got, reference.forward(list(args))[0], step)
        ours.append(got)
        with torch.no_grad():
            eager.append(float_net(*args))
    return {
        "inputs": inputs,
        "equal": measured.equal,
        "outputs": measured.outputs,
        "worst_steps": measured.worst_steps,
        "sqnr_db": sqnr_db(ours, eager),
    }


def make_program(model: str, size: str, variant: str) -> harness.Runner:
    """Lowers, loads on ExecuTorch's runtime (the CPU delegate registered), runs forward once
    (the delegate's init); the runner is one forward."""
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.runtime import loader

    env = _VARIANT_ENV.get(variant, {})
    pte, inputs = lower(model, size, CPU_INT8 if env else variant)
    _KEEP.append(pte)
    os.environ.setdefault(loader.ENV_LIBRARY, loader.load_cpu_backend())
    module = portable_lib._load_for_executorch_from_buffer(pte)
    args = list(inputs)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        module.forward(args)  # the delegate's init binds the int8 kernels here
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
    return harness.executorch_runner(module, args)


def benchmarks() -> list[harness.Benchmark]:
    size = _SIZE[0]
    out = []
    for model in MODELS:
        kwargs = {"model": model, "size": size}
        out.append(
            harness.Benchmark(
                name=f"{model}/{size}",
                baseline=BASELINE,
                variants=[
                    harness.Variant(name, make_program, {**kwargs, "variant": name})
                    for name in (
                        CPU_INT8,
                        CPU_INT8_WHOLE,
                        CPU_INT8_PORTABLE_QDQ,
                        CPU_INT8_OMP2,
                        BASELINE,
                        XNNPACK_FP32,
                        CPU_FP32,
                    )
                ],
                notes=f"PT2E int8 (XNNPACK quantizer, per-channel), {CALIBRATION_SAMPLES} "
                f"calibration samples; torch threads {torch.get_num_threads()}",
            )
        )
    return out


def summary(result: harness.BenchmarkResult) -> str:
    """Our int8 / our fp32 and what the partitioner left out, printed under each table."""
    medians = {v.name: v.median_ms for v in result.variants}
    lines = []
    ours, ours_fp32 = medians.get(CPU_INT8), medians.get(CPU_FP32)
    if ours and ours_fp32:
        lines.append(f"  cpu int8 / cpu fp32: {ours / ours_fp32:.2f}x")
    left_out = _LEFT_OUT.get(result.name, {})
    lines.append(f"  left out by the CPU partitioner (last lowering): {left_out or 'nothing'}")
    result.details = {"left_out": left_out}
    if _AGREEMENT_INPUTS[0] > 0:
        model, size = result.name.split("/")
        figures = agreement(model, size, _AGREEMENT_INPUTS[0])
        share = figures["equal"] / max(figures["outputs"], 1)
        sqnr = figures["sqnr_db"]
        lines.append(
            f"  cpu int8 vs the undelegated quantized program ({figures['inputs']} inputs): "
            f"{figures['equal']}/{figures['outputs']} outputs equal ({100 * share:.2f}%), "
            f"at most {figures['worst_steps']:.0f} step apart; SQNR vs eager float "
            + (f"{sqnr:.1f} dB" if sqnr is not None else "n/a")
        )
        result.details["agreement"] = figures
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.build_parser(__doc__ or "")
    parser.add_argument("--size", choices=("small", "full"), default="full")
    parser.add_argument(
        "--agreement",
        type=int,
        default=0,
        metavar="N",
        help="after each table, compare our int8 delegate with the undelegated quantized program "
        "(ExecuTorch's kernels; slow at full size) on N inputs and report the SQNR vs eager float",
    )
    args = parser.parse_args(argv)
    _SIZE[0] = args.size
    _AGREEMENT_INPUTS[0] = args.agreement
    return harness.run_main(args, benchmarks, summary)


if __name__ == "__main__":
    sys.exit(main())
