"""LiftConstantsPass: get_attr tensors become constant placeholders with a signature entry."""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from backends.transforms.lift_constants import LiftConstantsPass
from backends.transforms.program_checks import check_program_consistency
from backends.transforms.test.bn_test_util import run_program, to_edge_program


class _AddOffset(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.offset = torch.nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.offset) * 2


def _program_with_get_attr_constants() -> tuple[ExportedProgram, torch.Tensor]:
    """An Edge program where a pass-like edit left two get_attr reads of one tensor constant."""
    inputs = (torch.randn(3, 4),)
    ep = to_edge_program(_AddOffset().eval(), inputs)
    gm = ep.graph_module
    scale = torch.full((4,), 3.0)
    gm.register_buffer("folded_scale", scale)  # like a fusion that did not lift its result
    mul = next(n for n in gm.graph.nodes if "mul" in str(n.target))
    with gm.graph.inserting_before(mul):
        read_a = gm.graph.get_attr("folded_scale")
        read_b = gm.graph.get_attr("folded_scale")
    for read in (read_a, read_b):
        read.meta["val"] = mul.meta["val"].fake_mode.from_tensor(scale)
    with gm.graph.inserting_before(mul):
        first = gm.graph.call_function(mul.target, (mul.args[0], read_b))  # a second reader
    first.meta["val"] = mul.meta["val"]
    mul.args = (first, read_a)
    gm.recompile()
    return ep, inputs[0]


def test_get_attr_constants_are_lifted_once_and_numerics_kept() -> None:
    ep, x = _program_with_get_attr_constants()
    expected = run_program(ep, (x,))
    report = LiftConstantsPass()(ep)
    check_program_consistency(ep)
    assert report.changed and report.folded == 1
    assert [n for n in ep.graph.nodes if n.op == "get_attr"] == []
    assert not hasattr(ep.graph_module, "folded_scale")
    lifted = [s for s in ep.graph_signature.input_specs if s.kind == InputKind.CONSTANT_TENSOR]
    assert len(lifted) == 1 and lifted[0].target == report.added_constants[0]
    assert torch.equal(ep.constants[lifted[0].target], torch.full((4,), 3.0))
    torch.testing.assert_close(run_program(ep, (x,)), expected, rtol=0, atol=0)


def test_program_without_get_attr_is_unchanged() -> None:
    ep = to_edge_program(_AddOffset().eval(), (torch.randn(3, 4),))
    before = ep.graph_module.code
    report = LiftConstantsPass()(ep)
    assert not report.changed and ep.graph_module.code == before


def test_lifted_program_serializes_to_pte() -> None:
    from executorch.exir import EdgeProgramManager

    ep, x = _program_with_get_attr_constants()
    expected = run_program(ep, (x,))
    LiftConstantsPass()(ep)
    pte = EdgeProgramManager({"forward": ep}).to_executorch().buffer
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    module = _load_for_executorch_from_buffer(pte)
    torch.testing.assert_close(module.forward((x,))[0], expected, rtol=1e-6, atol=1e-6)
