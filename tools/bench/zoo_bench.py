"""Issue 17's benchmark: the held-out model zoo (`tools/bench/zoo.py`: MobileNetV3-, EfficientNet-,
ResNet-50-style, UNet, conv1d speech) on the CPU delegate vs the XNNPACK delegate vs ONNX Runtime
(`onnxruntime_peer.py`: the model through `torch.onnx.export`, the CPU execution provider with as
many threads as torch) vs eager PyTorch, at the zoo's full size by default. Ratios are against the
CPU delegate, measured interleaved in one run; peak memory is per path, each in a fresh process.
Under each table: the fraction of the Edge ops the CPU partitioner delegated (from its report;
also in the JSON as ``details``) and the ops XNNPACK left outside its delegate.

Two timing regimes (the harness's; run both before drawing conclusions on a shared machine):

    # settled (default): before every timed call, wait until the other threads are idle and make
    # one untimed call, so no variant is timed against its predecessor's spinning thread pool
    ./bazelw run //tools/bench:zoo_bench -- [--only unet/full] [--repeats 10] [--json out.json]

    # not settled: variants alternate call by call, each timed right after the previous one
    # (what an application switching between models sees)
    ./bazelw run //tools/bench:zoo_bench -- --no-settle [--repeats 10]

A/B a runtime switch in the same run (the variant's delegate initializes with the variable set):

    ./bazelw run //tools/bench:zoo_bench -- --variant-env ET_CPU_VECTOR_ACTIVATIONS=0

Add a variant with a switch nothing reads (``--variant-env ET_CPU_UNUSED_SWITCH=1``): the same
delegate twice, its ratio is the run's noise floor to judge the A/B against.

Where the CPU delegate's time goes, op by op, and how far it is from the GEMM peak (below):

    ./bazelw run //tools/bench:zoo_bench -- --only mobilenet_v3/full --profile [--profile-runs 10]
        [--profile-away] [--profile-env ET_CPU_ONEDNN_BLOCKS=0]

Other options: ``--no-onnxruntime`` (leave the ONNX Runtime column out), ``--size small`` (the
test size), ``--no-memory`` (skip the memory subprocesses),
``--profile [--profile-runs N]``: after each table, one extra run per model in a fresh process
with ``ET_CPU_PROFILE=1`` (the runtime times every kernel call and prints its table when the
delegate is destroyed): which provider ran each op and its share of the kernel time, summed per
kernel and provider, plus the top ops, and where one call's time goes: the wall time of
Python's ``run_method`` (back to back, Python's collector off), the delegates' share of it and,
inside them, the kernels and the time before, between and after them. The profiled run is not
one of the timed ones (profiling adds two clock reads per op). The profile also says how far
each op, each kernel class (dense, 1x1, depthwise, transposed convolution, GEMM, memory-bound) and
the whole call are from the GEMM peak: FLOPs from the payload's shapes (`op_cost.py`) over the
measured time, against float32 `torch.mm` at 1024^3 measured in the same run; an inverted
residual block run as one kernel is a fused chain (which classes its FLOPs are is said under the
table), ``--profile-env ET_CPU_ONEDNN_BLOCKS=0`` (variables set in the profiled processes only)
times its convolutions one by one. The profile is `op_profile.py`'s (shared with
`cpu_delegate_bench.py`); ``--profile-child MODEL SIZE RUNS [back-to-back|away]`` runs its
profiled process by hand (the table on stderr).
``--profile-away`` (with or without ``--profile``): where a call after time away loses its time,
op by op. The CPU delegate is profiled again with every call made after ``gc.collect()`` (the gap
before each timed call in the harness, what the alternating regime times), and ONNX Runtime
(unless ``--no-onnxruntime``) both ways with its own profiler (`enable_profiling`); under the
table each side's kernel time back to back and after time away, and the ops that added the most.
"""

from __future__ import annotations

import collections
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tools.bench import harness, onnxruntime_peer, op_profile, zoo

BASELINE = "cpu delegate"
XNNPACK = "xnnpack"
ONNXRUNTIME = onnxruntime_peer.NAME
EAGER = "eager"
_PEERS = [ONNXRUNTIME]  # --no-onnxruntime empties it
_SIZE = ["full"]  # --size rewrites it before the benchmarks are built
# --profile, --profile-away: profiled runs per model, back to back and after time away.
_PROFILE = [op_profile.Options()]
_VARIANT_ENV: list[tuple[str, str]] = []  # --variant-env NAME=VALUE, in order
# What the CPU delegate's factory learned while lowering, per benchmark name ("model/size").
_DELEGATION: dict[str, dict[str, Any]] = {}
_XNNPACK_OUTSIDE: dict[str, dict[str, int]] = {}
# The runtime does not own a loaded program's bytes: keep them alive with the module.
_KEEP: list[bytes] = []
_PROFILE_CHILD_FLAG = "--profile-child"


def _outer_ops(program: Any) -> dict[str, int]:
    """Ops of a lowered program that run outside any delegate: op key -> count."""
    import operator

    from backends.cpu.routes import op_key

    counts: collections.Counter[str] = collections.Counter()
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if node.target is torch.ops.higher_order.executorch_call_delegate:
            continue
        counts[op_key(node.target) or str(node.target)] += 1
    return dict(counts)


def lower(model: str, size: str, path: str) -> tuple[bytes, tuple[torch.Tensor, ...]]:
    """Exports the zoo model and lowers it for `path` (cpu delegate or xnnpack); returns the .pte
    bytes and the inputs. Records the delegation figures of the lowering."""
    from executorch.exir import to_edge_transform_and_lower

    net, inputs = zoo.create(model, size)
    name = f"{model}/{size}"
    if path == BASELINE:
        edge, partitioner = op_profile.lower_cpu(net, inputs)
        report = partitioner.report
        total = len(report.claimed) + len(report.left_out)
        left_out = collections.Counter(f"{n.op} ({n.reason.value})" for n in report.left_out)
        _DELEGATION[name] = {
            "delegated_nodes": len(report.claimed),
            "total_nodes": total,
            "fraction": len(report.claimed) / total if total else 0.0,
            "partitions": report.partitions,
            "left_out": dict(left_out),
        }
    elif path == XNNPACK:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        with torch.no_grad():
            exported = torch.export.export(net, inputs)
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        _XNNPACK_OUTSIDE[name] = _outer_ops(edge.exported_program())
    else:
        raise ValueError(f"unknown path {path!r}")
    return bytes(edge.to_executorch().buffer), inputs


def make_program(
    model: str, size: str, path: str, env: Mapping[str, str] | None = None
) -> harness.Runner:
    """Lowers the zoo model for `path`, loads it on ExecuTorch's runtime, runs forward. `env`
    is set while the delegate initializes (the runtime's switches are read at init), then
    restored."""
    from executorch.extension.pybindings import portable_lib

    from backends.cpu.runtime import loader

    pte, inputs = lower(model, size, path)
    _KEEP.append(pte)
    # The memory and profile subprocesses load the same library.
    os.environ.setdefault(loader.ENV_LIBRARY, loader.load_cpu_backend())
    module = portable_lib._load_for_executorch_from_buffer(pte)
    args = list(inputs)
    with harness.environment(dict(env or {})):
        module.forward(args)  # loads the method: the delegate's init runs here
    return harness.executorch_runner(module, args)


def parse_variant_env(text: str) -> tuple[str, str]:
    """`NAME=VALUE` of --variant-env; a ValueError naming the text otherwise."""
    return op_profile.parse_assignment(text, "--variant-env")


def make_eager(model: str, size: str) -> harness.Runner:
    """The zoo model's forward in eager PyTorch under torch.no_grad()."""
    net, inputs = zoo.create(model, size)

    def run() -> object:
        with torch.no_grad():
            return net(*inputs)

    return run


def make_onnxruntime(model: str, size: str) -> harness.Runner:
    """The zoo model exported to ONNX and run on ONNX Runtime's CPU provider."""
    net, inputs = zoo.create(model, size)
    return onnxruntime_peer.make_runner(net.eval(), inputs)


def benchmarks() -> list[harness.Benchmark]:
    size = _SIZE[0]
    out = []
    for model, entry in zoo.ZOO.items():
        kwargs = {"model": model, "size": size}
        shapes = " x ".join(str(spec) for spec in entry.inputs[size])
        # --variant-env: the CPU delegate again with a runtime switch set, timed side by side.
        switched = [
            harness.Variant(
                f"{BASELINE} {name}={value}",
                make_program,
                {**kwargs, "path": BASELINE, "env": {name: value}},
            )
            for name, value in _VARIANT_ENV
        ]
        out.append(
            harness.Benchmark(
                name=f"{model}/{size}",
                baseline=BASELINE,
                variants=[
                    harness.Variant(BASELINE, make_program, {**kwargs, "path": BASELINE}),
                    *switched,
                    harness.Variant(XNNPACK, make_program, {**kwargs, "path": XNNPACK}),
                    *[harness.Variant(ONNXRUNTIME, make_onnxruntime, kwargs) for _ in _PEERS],
                    harness.Variant(EAGER, make_eager, kwargs),
                ],
                notes=f"{entry.description}; inputs {shapes}; "
                f"torch threads {torch.get_num_threads()}"
                + (f"; {onnxruntime_peer.describe()}" if _PEERS else ""),
            )
        )
    return out


# --- summary under each table ---------------------------------------------------------------------


def summary(result: harness.BenchmarkResult) -> str:
    """Delegated fraction, what XNNPACK left outside, and (with --profile) the per-op profile;
    the same figures go into `result.details` (the JSON)."""
    lines = []
    delegation = _DELEGATION.get(result.name)
    if delegation is not None:
        result.details["cpu_delegate"] = delegation
        left = ", ".join(f"{op} x{n}" for op, n in delegation["left_out"].items()) or "nothing"
        lines.append(
            f"  cpu delegate: {delegation['delegated_nodes']}/{delegation['total_nodes']} Edge "
            f"ops delegated ({100 * delegation['fraction']:.1f}%) in "
            f"{delegation['partitions']} partition(s); left out: {left}"
        )
    outside = _XNNPACK_OUTSIDE.get(result.name)
    if outside is not None:
        result.details["xnnpack_ops_outside"] = outside
        text = ", ".join(f"{op} x{n}" for op, n in outside.items()) or "nothing"
        lines.append(f"  xnnpack: ops outside its delegate: {text}")
    lines += op_profile.report(result, op_profile.ZOO, _PROFILE[0], onnxruntime=bool(_PEERS))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == [_PROFILE_CHILD_FLAG]:
        # The profiled process by hand: MODEL SIZE RUNS [back-to-back|away] (op_profile's child).
        return op_profile.child_main([op_profile.ZOO, *arguments[1:]])
    parser = harness.build_parser(__doc__ or "")
    parser.add_argument("--size", default="full", choices=zoo.SIZES, help="zoo size (full)")
    op_profile.add_arguments(parser)
    parser.add_argument(
        "--variant-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="also time the CPU delegate initialized with this environment variable set (e.g. "
        "ET_CPU_VECTOR_ACTIVATIONS=0), side by side with the others; repeat for more variants",
    )
    parser.add_argument(
        "--no-onnxruntime",
        action="store_true",
        help="leave ONNX Runtime out (it is timed beside XNNPACK by default)",
    )
    args = parser.parse_args(arguments)
    _PEERS[:] = [] if args.no_onnxruntime else [ONNXRUNTIME]
    try:
        _VARIANT_ENV[:] = [parse_variant_env(text) for text in args.variant_env]
    except ValueError as exc:
        parser.error(str(exc))
    _SIZE[0] = args.size
    _PROFILE[0] = op_profile.options_from(args, parser)
    return harness.run_main(args, benchmarks, after_each=summary)


if __name__ == "__main__":
    raise SystemExit(main())
