"""Issue 21: the debug-handle map CpuBackend.preprocess hands ExecuTorch, keyed by the names of
the runtime's profiling events (backends/cpu/profiling_events.py)."""

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.lowered_backend_module import LoweredBackendModule

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.profiling_events import MAX_FUSED_STEPS, event_name
from backends.cpu.routes import Provider
from backends.cpu.test.models import randomize_batch_norm


class _ConvBnReluAdd(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shift = x.mean(dim=1, keepdim=True)  # runs first, beside the chain below
        return torch.sigmoid(torch.relu(self.bn(self.conv(x))) + shift)


def _lowered(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> LoweredBackendModule:
    edge = to_edge_transform_and_lower(
        torch.export.export(model.eval(), inputs), partitioner=[CpuPartitioner()]
    )
    (module,) = [
        m
        for _, m in edge.exported_program().graph_module.named_children()
        if isinstance(m, LoweredBackendModule)
    ]
    return module


def _handles(module: LoweredBackendModule) -> dict[str, int]:
    """Debug handle of each call node of the partition as to_edge numbered it."""
    return {
        node.name: node.meta["debug_handle"]
        for node in module.original_module.graph.nodes
        if node.op == "call_function"
    }


OPTIMIZED = int(Provider.OPTIMIZED)
REFERENCE = int(Provider.REFERENCE)


def test_event_names_list_the_nodes_then_the_provider() -> None:
    assert event_name(["conv"], OPTIMIZED) == "conv (Optimized)"
    assert event_name(["conv", "relu"], REFERENCE) == "conv + relu (Reference)"
    assert event_name(["x"], 7) == "x (provider 7)"


def test_folded_batch_norms_and_fusable_chains_are_in_the_map() -> None:
    module = _lowered(randomize_batch_norm(_ConvBnReluAdd()), (torch.randn(1, 3, 8, 8),))
    handles = _handles(module)
    mapping = module.meta["debug_handle_map"]
    conv, relu = "aten_convolution_default", "aten_relu_default"
    bn = "aten__native_batch_norm_legit_no_training_default"
    add, sigmoid = "aten_add_tensor", "aten_sigmoid_default"
    # The batch norm is folded away: the convolution's events carry its handle too.
    assert mapping[event_name([conv], OPTIMIZED)] == tuple(sorted({handles[conv], handles[bn]}))
    assert mapping[event_name([conv], REFERENCE)] == mapping[event_name([conv], OPTIMIZED)]
    # conv -> relu -> add -> sigmoid read each other in turn: every prefix may be fused.
    chain = [conv, relu, add, sigmoid]
    for length in range(2, len(chain) + 1):
        covered = chain[:length]
        want = {handles[n] for n in covered} | {handles[bn]}
        assert mapping[event_name(covered, OPTIMIZED)] == tuple(sorted(want))
    # The convolution, right after the mean, does not read it: no group joins them.
    mean = "aten_mean_dim"
    assert mean in handles
    assert not [key for key in mapping if key.startswith(f"{mean} + ")]
    # A group never runs on Reference: Reference names cover one op each.
    assert all(" + " not in key for key in mapping if key.endswith("(Reference)"))


def test_groups_stop_at_the_runtimes_longest_fusion() -> None:
    layers: list[torch.nn.Module] = [torch.nn.Conv2d(2, 2, 1)]
    layers += [torch.nn.ReLU() for _ in range(MAX_FUSED_STEPS + 3)]
    module = _lowered(torch.nn.Sequential(*layers), (torch.randn(1, 2, 4, 4),))
    longest = max(key.count(" + ") for key in module.meta["debug_handle_map"])
    assert longest == MAX_FUSED_STEPS
