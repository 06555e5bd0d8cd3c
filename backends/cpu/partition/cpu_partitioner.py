"""CpuPartitioner: tags the Edge ops the CPU delegate can run, and reports what it left out.

Use as ``to_edge_transform_and_lower(ep, partitioner=[CpuPartitioner()])``. After lowering,
``partitioner.report`` (the last partitioned method) or ``partitioner.reports`` (one per
`partition` call, in call order) say which nodes were claimed and, for every node left out, why:
``LeaveOutReason.NO_ROUTE``, ``DTYPE``, ``DYNAMIC_SHAPE``, ``QUANTIZED`` or ``LAYOUT``.
"""

import operator
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data, tag_mutated_buffer
from torch.export import ExportedProgram
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from backends.cpu.cpu_backend import CpuBackend
from backends.cpu.partition.node_support import (
    LeaveOutReason,
    LeftOutNode,
    check_node,
)
from backends.cpu.routes import op_key, ops_to_keep_undecomposed
from backends.cpu.symbolic_dims import (
    is_size_node,
    keep_bounds_when_retraced,
    warn_narrowed_bounds,
    warn_unkept_bounds,
)
from backends.cpu.torchao.graph import TORCHAO_OPS


@dataclass(frozen=True)
class PartitionReport:
    """The outcome of one `CpuPartitioner.partition` call."""

    claimed: tuple[str, ...]  # names of the op nodes tagged for the delegate, in graph order
    left_out: tuple[LeftOutNode, ...]  # every op node not claimed, in graph order
    partitions: int  # number of delegate subgraphs

    def reasons(self) -> dict[str, LeaveOutReason]:
        """Node name -> why it was left out."""
        return {node.name: node.reason for node in self.left_out}

    def __str__(self) -> str:
        lines = [f"{len(self.claimed)} ops claimed in {self.partitions} partition(s)"]
        lines += [f"  left out: {node}" for node in self.left_out]
        return "\n".join(lines)


def _is_getitem(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem


class _CpuSupport(OperatorSupportBase):
    """Answers CapabilityBasedPartitioner from precomputed decisions."""

    def __init__(self, decisions: Mapping[torch.fx.Node, LeftOutNode | None]) -> None:
        super().__init__()
        self._decisions = decisions

    def is_node_supported(
        self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node
    ) -> bool:
        if _is_getitem(node):  # goes where its multi-output producer goes
            source = node.args[0]
            return source in self._decisions and self._decisions[source] is None  # type: ignore[index]
        return node in self._decisions and self._decisions[node] is None


def _keep_sizes_with_their_users(
    decisions: dict[torch.fx.Node, LeftOutNode | None],
) -> dict[torch.fx.Node, LeftOutNode | None]:
    """Leaves out size nodes read outside the delegate, and the nodes reading such a size.

    A size node (`sym_size.int`, ...) inside the delegate is an expression of the payload, not a
    value the delegate can output; one outside it would be a symbolic delegate input.
    """

    def claimed(node: torch.fx.Node) -> bool:
        return node in decisions and decisions[node] is None

    changed = True
    while changed:
        changed = False
        for node, decision in decisions.items():
            if decision is not None:
                continue
            if is_size_node(node):
                outside = [user.name for user in node.users if not claimed(user)]
                detail = f"size read outside the delegate by {', '.join(outside)}"
            else:
                outside = [
                    a.name for a in node.all_input_nodes if is_size_node(a) and not claimed(a)
                ]
                detail = f"reads size {', '.join(outside)}, which stays outside the delegate"
            if outside:
                key = op_key(node.target) or str(node.target)
                decisions[node] = LeftOutNode(node.name, key, LeaveOutReason.DYNAMIC_SHAPE, detail)
                changed = True
    return decisions


def _claims_whole(node: torch.fx.Node) -> bool:
    """Whether `partition` will claim `node` (an ATen node of a kept-undecomposed op)."""
    return check_node(node) is None


class UnsupportedTorchaoOpError(RuntimeError):
    """A torchao quantization op the delegate cannot take: ExecuTorch has no kernel for it, so
    leaving it outside would only fail later in `to_executorch()` ("Missing out variants")."""


def _fail_on_stranded_torchao_ops(left_out: list[LeftOutNode]) -> None:
    stranded = [node for node in left_out if node.op in TORCHAO_OPS]
    if stranded:
        lines = "\n".join(f"  {node}" for node in stranded)
        raise UnsupportedTorchaoOpError(
            "CpuPartitioner cannot take these torchao ops, and ExecuTorch has no kernel to run "
            f"them outside a delegate:\n{lines}\nThe CPU delegate runs torchao's int4/int8 "
            "weights (per group or per channel, symmetric or asymmetric) in linears quantized "
            "with Int8DynamicActivationIntxWeightConfig (8da4w) or IntxWeightOnlyConfig and in "
            "embeddings quantized with IntxWeightOnlyConfig; quantize these layers with one of "
            "those configs, or leave them unquantized."
        )


def _tag_mutated_buffers(program: ExportedProgram) -> None:
    """Moves each mutated buffer into the partition of its users (ExecuTorch's
    `tag_mutated_buffer`), but only where the delegate can own it: every user of the buffer and
    the node written back into it are in that one partition, and its shape is static. Any other
    mutated buffer stays outside, as without this step."""
    signature = program.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    write_back = {fqn: name for name, fqn in signature.buffers_to_mutate.items()}
    by_name = {node.name: node for node in program.graph.nodes}
    keep: set[torch.fx.Node] = set()
    for node in program.graph.nodes:
        fqn = signature.inputs_to_buffers.get(node.name) if node.op == "placeholder" else None
        if fqn not in mutated:
            continue
        tags = {user.meta.get("delegation_tag") for user in node.users}
        source = by_name.get(write_back.get(fqn, ""))
        value = node.meta.get("val")
        if (
            len(tags) == 1
            and None not in tags
            and source is not None
            and source.meta.get("delegation_tag") in tags
            and isinstance(value, torch.Tensor)
            and all(isinstance(dim, int) for dim in value.shape)
        ):
            keep.add(node)
    tag_mutated_buffer(program)
    for node in program.graph.nodes:
        fqn = signature.inputs_to_buffers.get(node.name) if node.op == "placeholder" else None
        if fqn in mutated and node not in keep:
            node.meta.pop("delegation_tag", None)


class CpuPartitioner(Partitioner):
    """Claims every node with a route whose tensors have bounded sizes and a supported dtype."""

    TAG_PREFIX = "cpu_backend_"

    def __init__(self, delegate_buffers: bool | None = None) -> None:
        """`delegate_buffers`: move mutated buffers (KV caches) whose every user is in one
        partition into that delegate, which then owns them as state and writes them in place.
        False keeps them outside (each call takes the buffer as an input, returns the mutated
        copy, and ExecuTorch copies it back). None (default) reads ET_CPU_DELEGATE_BUFFERS:
        "0" means False, anything else True."""
        super().__init__()
        self.delegation_spec = DelegationSpec(CpuBackend.__name__, [])
        self.reports: list[PartitionReport] = []
        if delegate_buffers is None:
            delegate_buffers = os.environ.get("ET_CPU_DELEGATE_BUFFERS", "1") != "0"
        self.delegate_buffers = delegate_buffers

    @property
    def report(self) -> PartitionReport:
        """The report of the most recent `partition` call."""
        if not self.reports:
            raise RuntimeError("CpuPartitioner.report: partition() has not run yet")
        return self.reports[-1]

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Callable[[torch.fx.Node], bool] | None]:
        # Keep e.g. aten.linear whole (preprocess's linear-BN fusion needs to see it), but only
        # where `partition` will claim it: a kept op left outside the delegate is neither
        # decomposed nor delegated, and lowering fails. The filter is the partitioner's own
        # per-node decision (`check_node`), so the two cannot disagree; every other node of
        # these ops is decomposed by to_edge as usual and runs wherever its parts go.
        return ops_to_keep_undecomposed(), _claims_whole

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        graph_module = exported_program.graph_module
        decisions = _keep_sizes_with_their_users(
            {
                node: check_node(node)
                for node in graph_module.graph.nodes
                if node.op == "call_function" and not _is_getitem(node)
            }
        )
        partitioner = CapabilityBasedPartitioner(
            graph_module, _CpuSupport(decisions), allows_single_node_partition=True
        )
        partitions = partitioner.propose_partitions()
        tags: dict[str, DelegationSpec] = {}
        claimed: set[torch.fx.Node] = set()
        for partition in partitions:
            tag = f"{self.TAG_PREFIX}{partition.id}"
            for node in partition.nodes:
                node.meta["delegation_tag"] = tag
                claimed.add(node)
            tags[tag] = self.delegation_spec
        # Parameters, buffers and constants used only inside a partition move into the delegate,
        # so the .pte holds them once (as preprocess's named data), not also in the outer program.
        tag_constant_data(exported_program)
        if self.delegate_buffers:
            _tag_mutated_buffers(exported_program)

        left_out = []
        for node, decision in decisions.items():
            if node in claimed:
                continue
            if decision is None:  # supported, yet the partitioner could not place it
                decision = LeftOutNode(
                    node.name, str(node.target), LeaveOutReason.NO_ROUTE, "not partitionable"
                )
            left_out.append(decision)
        _fail_on_stranded_torchao_ops(left_out)
        if claimed:
            # Bounded dynamic dims: a plain edge.to_executorch() must plan the exported bounds.
            why_not = keep_bounds_when_retraced(CpuBackend.__name__)
            if why_not is not None:
                warn_unkept_bounds(exported_program, why_not)
            warn_narrowed_bounds(exported_program)
        self.reports.append(
            PartitionReport(
                claimed=tuple(n.name for n in decisions if n in claimed),
                left_out=tuple(left_out),
                partitions=len(partitions),
            )
        )
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


__all__ = [
    "CpuPartitioner",
    "LeaveOutReason",
    "LeftOutNode",
    "PartitionReport",
    "UnsupportedTorchaoOpError",
]
