"""Pass time of the batch-norm folding pipeline on generated chains of conv -> batch-norm blocks.

Issue #3's scaling check: the per-block time on a 10,000-block chain over the per-block time on a
1,000-block chain should be close to 1 (the passes are linear in the program size).

`torch.export` of a 10,000-module chain takes many minutes, so the chains are built directly as
ATen-dialect ExportedPrograms (the same placeholders, signature, state dict and
`conv2d`/`batch_norm` nodes `torch.export` produces for `Conv2d` + `BatchNorm2d`). Each timed call
consumes a freshly generated program, since the passes edit the program in place.

    bazel run //tools/bench:transforms_bench -- [--blocks 1000 10000] [--repeats 3] [--json -]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.export import ExportedProgram
from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)

from backends.transforms.fuse_batch_norm_with_conv import FuseBatchNormWithConvPass
from backends.transforms.pipeline import run_passes
from tools.bench import harness

CHANNELS = 4
SPATIAL = 4


def conv_bn_chain(blocks: int, seed: int = 0) -> ExportedProgram:
    """An ATen-dialect program: `blocks` x (conv2d 3x3 'same' with bias -> inference batch_norm)."""
    generator = torch.Generator().manual_seed(seed)
    fake_mode = FakeTensorMode()
    graph = torch.fx.Graph()
    state: dict[str, torch.Tensor] = {}
    specs: list[InputSpec] = []
    weight_shape = (CHANNELS, CHANNELS, 3, 3)
    # One fake value per shape: placeholders only need shape/dtype metadata.
    fake_weight = fake_mode.from_tensor(torch.empty(weight_shape))
    fake_vector = fake_mode.from_tensor(torch.empty(CHANNELS))
    fake_activation = fake_mode.from_tensor(torch.empty(1, CHANNELS, SPATIAL, SPATIAL))

    def constant(name: str, tensor: torch.Tensor, kind: InputKind) -> torch.fx.Node:
        node = graph.placeholder(name)
        node.meta["val"] = fake_weight if tensor.dim() == 4 else fake_vector
        target = name.replace("_", ".")
        if kind == InputKind.PARAMETER:
            state[target] = torch.nn.Parameter(tensor, requires_grad=False)
            specs.append(InputSpec(kind, TensorArgument(node.name), target, None))
        else:
            state[target] = tensor
            specs.append(InputSpec(kind, TensorArgument(node.name), target, True))
        return node

    params = []
    for i in range(blocks):
        params.append(
            (
                constant(
                    f"conv{i}_weight",
                    torch.randn(weight_shape, generator=generator) * 0.3,
                    InputKind.PARAMETER,
                ),
                constant(
                    f"conv{i}_bias", torch.randn(CHANNELS, generator=generator), InputKind.PARAMETER
                ),
                constant(
                    f"bn{i}_weight",
                    torch.rand(CHANNELS, generator=generator) + 0.5,
                    InputKind.PARAMETER,
                ),
                constant(
                    f"bn{i}_bias", torch.randn(CHANNELS, generator=generator), InputKind.PARAMETER
                ),
            )
        )
    stats = [
        (
            constant(
                f"bn{i}_running_mean", torch.randn(CHANNELS, generator=generator), InputKind.BUFFER
            ),
            constant(
                f"bn{i}_running_var",
                torch.rand(CHANNELS, generator=generator) + 0.5,
                InputKind.BUFFER,
            ),
        )
        for i in range(blocks)
    ]
    x = graph.placeholder("x")
    x.meta["val"] = fake_activation
    specs.append(InputSpec(InputKind.USER_INPUT, TensorArgument("x"), None, None))
    value = x
    for (w, b, bn_w, bn_b), (mean, var) in zip(params, stats, strict=True):
        conv = graph.call_function(torch.ops.aten.conv2d.default, (value, w, b, [1, 1], [1, 1]))
        conv.meta["val"] = fake_activation
        value = graph.call_function(
            torch.ops.aten.batch_norm.default,
            (conv, bn_w, bn_b, mean, var, False, 0.1, 1e-5, False),
        )
        value.meta["val"] = fake_activation
    graph.output((value,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    signature = ExportGraphSignature(
        input_specs=specs,
        output_specs=[OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(value.name), None)],
    )
    _, in_spec = pytree.tree_flatten(((torch.empty(0),), {}))
    _, out_spec = pytree.tree_flatten((torch.empty(0),))
    call_graph = [ModuleCallEntry("", ModuleCallSignature([], [], in_spec, out_spec))]
    return ExportedProgram(
        root=gm,
        graph=gm.graph,
        graph_signature=signature,
        state_dict=state,
        range_constraints={},
        module_call_graph=call_graph,
    )


def make_pipeline(blocks: int, copies: int) -> harness.Runner:
    """Pre-generates `copies` programs; each call folds and cleans one of them."""
    programs = [conv_bn_chain(blocks, seed) for seed in range(copies)]

    def run() -> None:
        if not programs:
            raise RuntimeError("out of pre-generated programs: raise copies")
        ep = programs.pop()
        reports = run_passes(ep, [FuseBatchNormWithConvPass()])
        if reports[0].folded != blocks or len(ep.state_dict) != 2 * blocks:
            raise AssertionError(f"expected {blocks} folds, got {[r.summary() for r in reports]}")

    return run


def check_numerics(blocks: int = 8) -> float:
    """Max |fused - unfused| / max |unfused| on a short chain (the generated programs run)."""
    x = torch.randn(1, CHANNELS, SPATIAL, SPATIAL)
    ep = conv_bn_chain(blocks)
    before = ep.module()(x)[0]
    run_passes(ep, [FuseBatchNormWithConvPass()])
    return float((ep.module()(x)[0] - before).abs().max() / before.abs().max())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--blocks", type=int, nargs=2, default=[1000, 10000], metavar=("SMALL", "LARGE")
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per chain length")
    parser.add_argument("--memory", action="store_true", help="also measure peak RSS per chain")
    parser.add_argument("--json", metavar="FILE", help="harness JSON ('-': stdout)")
    args = parser.parse_args(argv)
    small, large = args.blocks

    error = check_numerics()
    print(f"numerics: 8-block chain, max |fused - unfused| / max |unfused| = {error:.2e}")
    benchmark = harness.Benchmark(
        name="conv_bn_chain_pipeline",
        baseline=f"{small}_blocks",
        notes="FuseBatchNormWithConvPass + LiftConstantsPass + PruneUnusedConstantsPass",
        variants=[
            harness.Variant(f"{n}_blocks", make_pipeline, {"blocks": n, "copies": args.repeats})
            for n in (small, large)
        ],
    )
    options = harness.Options(
        repeats=args.repeats, warmup=0, min_repeats=1, budget_s=1e9, memory=args.memory
    )
    result = harness.run_benchmark(benchmark, options, lambda m: print(m, file=sys.stderr))
    print(harness.render_text([result]))
    if args.json:
        import json

        text = json.dumps(harness.to_json([result]), indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text)
    by_name = {v.name: v for v in result.variants}
    small_ms, large_ms = by_name[f"{small}_blocks"].median_ms, by_name[f"{large}_blocks"].median_ms
    if small_ms is None or large_ms is None:
        print("a variant failed; no scaling ratio", file=sys.stderr)
        return 1
    per_small, per_large = small_ms / small, large_ms / large
    print(
        f"per block: {per_small:.3f} ms at {small} blocks, {per_large:.3f} ms at {large}; "
        f"ratio {per_large / per_small:.2f} (1.0 = linear)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
