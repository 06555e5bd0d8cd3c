"""check_program_consistency: catches each kind of drift between graph, signature and tables."""

from __future__ import annotations

import pytest
import torch

from backends.transforms.program_checks import (
    ProgramInconsistencyError,
    check_program_consistency,
    constant_bytes,
)
from backends.transforms.test.bn_test_util import export


def _program() -> torch.export.ExportedProgram:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).eval()
    return export(model, (torch.randn(2, 4),))


def test_fresh_export_is_consistent() -> None:
    ep = _program()
    check_program_consistency(ep)
    assert constant_bytes(ep) == 4 * (12 + 3 + 3 + 3 + 3 + 3) + 8


def test_orphaned_state_dict_entry_is_reported() -> None:
    ep = _program()
    ep.state_dict["stale.weight"] = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ProgramInconsistencyError, match=r"'stale\.weight' is named by no input"):
        check_program_consistency(ep)


def test_missing_tensor_is_reported() -> None:
    ep = _program()
    del ep.state_dict["1.running_var"]
    with pytest.raises(ProgramInconsistencyError, match="missing from state dict"):
        check_program_consistency(ep)


def test_placeholder_without_spec_is_reported() -> None:
    ep = _program()
    first = next(iter(ep.graph.nodes))
    with ep.graph.inserting_before(first):
        ep.graph.placeholder("dangling")
    with pytest.raises(ProgramInconsistencyError, match="placeholders but"):
        check_program_consistency(ep)


def test_shape_mismatch_is_reported() -> None:
    ep = _program()
    ep.state_dict["0.bias"] = torch.nn.Parameter(torch.zeros(5))
    with pytest.raises(ProgramInconsistencyError, match=r"placeholder val \(3,\)"):
        check_program_consistency(ep)


def test_unlifted_get_attr_tensor_is_reported() -> None:
    ep = _program()
    ep.graph_module.register_buffer("loose", torch.ones(1))
    first_call = next(n for n in ep.graph.nodes if n.op == "call_function")
    with ep.graph.inserting_before(first_call):
        ep.graph.get_attr("loose")
    with pytest.raises(ProgramInconsistencyError, match="unlifted tensor constant"):
        check_program_consistency(ep)
    check_program_consistency(ep, allow_get_attr_tensors=True)
