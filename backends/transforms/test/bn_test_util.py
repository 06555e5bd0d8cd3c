"""Shared helpers of the transform tests: randomised batch norms, export, eager comparison."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from executorch.exir import EdgeCompileConfig, to_edge
from torch.export import ExportedProgram

from backends.transforms.batch_norm_match import aten_op
from backends.transforms.fuse_batch_norm_with_conv import FuseBatchNormWithConvPass
from backends.transforms.fuse_batch_norm_with_linear import FuseBatchNormWithLinearPass
from backends.transforms.pass_report import PassReport
from backends.transforms.pipeline import run_passes
from backends.transforms.program_checks import check_program_consistency

# float32: folding reorders a multiply-add per channel; errors stay a few ulps of the output scale.
ATOL = 1e-4
RTOL = 1e-4

BN_OPS = {
    "aten.batch_norm.default",
    "aten.native_batch_norm.default",
    "aten._native_batch_norm_legit_no_training.default",
    "aten._native_batch_norm_legit_functional.default",
    "aten._native_batch_norm_legit.default",
}


ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)


def randomize_batch_norms(model: ModuleT, generator: torch.Generator) -> ModuleT:
    """Gives every batch norm non-trivial statistics and affine parameters, so folding matters."""
    for module in model.modules():
        if not isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            continue
        with torch.no_grad():
            if module.running_mean is not None and module.running_var is not None:
                module.running_mean.copy_(torch.randn(module.num_features, generator=generator))
                module.running_var.copy_(
                    torch.rand(module.num_features, generator=generator) * 2 + 0.1
                )
            if module.affine:
                module.weight.copy_(torch.randn(module.num_features, generator=generator))
                module.bias.copy_(torch.randn(module.num_features, generator=generator))
    return model


def export(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> ExportedProgram:
    return torch.export.export(model, inputs)


def to_edge_program(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], keep_linear: bool = False
) -> ExportedProgram:
    """The Edge-dialect program a backend's preprocess would see (linear kept if asked)."""
    ep = export(model, inputs)
    config = EdgeCompileConfig(
        _check_ir_validity=not keep_linear,
        preserve_ops=[torch.ops.aten.linear.default] if keep_linear else [],
    )
    return to_edge(ep, compile_config=config).exported_program()


def op_names(ep: ExportedProgram) -> list[str]:
    """The ATen op behind every call_function node (Edge ops unwrapped), in graph order."""
    names = []
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        names.append(str(aten_op(node.target)))
    return names


def batch_norm_count(ep: ExportedProgram) -> int:
    return sum(1 for name in op_names(ep) if name in BN_OPS)


def run_program(ep: ExportedProgram, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    with torch.no_grad():
        out = ep.module()(*inputs)
    return out[0] if isinstance(out, tuple | list) else out


def eager(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    with torch.no_grad():
        out = copy.deepcopy(model)(*inputs)
    return out[0] if isinstance(out, tuple | list) else out


def fusion_passes() -> list[Callable[[ExportedProgram], PassReport]]:
    return [FuseBatchNormWithConvPass(), FuseBatchNormWithLinearPass()]


def run_checked(
    ep: ExportedProgram, passes: Sequence[Callable[[ExportedProgram], PassReport]]
) -> list[PassReport]:
    """Runs each pass (then the hygiene passes) and checks consistency after every one."""
    reports = []
    for program_pass in passes:
        reports.append(program_pass(ep))
        check_program_consistency(ep)
    reports.extend(run_passes(ep, []))
    check_program_consistency(ep)
    return reports


def state_bytes(ep: ExportedProgram) -> tuple[int, int]:
    """(tensor count, total bytes) of the state dict and constants table together."""
    tensors = [
        t for t in [*ep.state_dict.values(), *ep.constants.values()] if isinstance(t, torch.Tensor)
    ]
    return len(tensors), sum(t.numel() * t.element_size() for t in tensors)
