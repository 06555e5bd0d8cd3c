"""Activations on the CPU delegate: standalone on the Optimized (oneDNN) provider, fused into the
convolution or linear before them as post-ops, and on the Reference provider (ExecuTorch's kernels,
or the runtime's built-in ones for hardswish/hardsigmoid/silu, which ExecuTorch's registry lacks).

Every case lowers the model twice (route table as is; every route forced to Reference) and
compares both with each other and with eager, within provider_compare's tolerance (1e-4, relative
to the output's scale): oneDNN's exp/erf/tanh approximations differ from libm's by a few ulps.
"""

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.provider_compare import assert_close_scaled, placed, run_both

Act = Callable[[torch.Tensor], torch.Tensor]

# name -> (activation, the kernel its route names)
ACTIVATIONS: dict[str, tuple[Act, str]] = {
    "relu": (torch.relu, "aten::relu.out"),
    "relu6": (F.relu6, "aten::hardtanh.out"),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 0.75), "aten::hardtanh.out"),
    "clamp": (lambda x: torch.clamp(x, -0.3, 1.5), "aten::clamp.out"),
    "clamp_min": (lambda x: torch.clamp(x, min=0.25), "aten::clamp.out"),
    "sigmoid": (torch.sigmoid, "aten::sigmoid.out"),
    "tanh": (torch.tanh, "aten::tanh.out"),
    "hardswish": (F.hardswish, "aten::hardswish.out"),
    "hardsigmoid": (F.hardsigmoid, "aten::hardsigmoid.out"),
    "silu": (F.silu, "aten::silu.out"),
    "gelu": (F.gelu, "aten::gelu.out"),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), "aten::gelu.out"),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), "aten::leaky_relu.out"),
    "elu": (lambda x: F.elu(x, 0.7), "aten::elu.out"),
}
# Activations the fusion offers as post-ops (relu and clamps were fused before this change).
FUSED = [
    "hardswish",
    "hardsigmoid",
    "silu",
    "sigmoid",
    "tanh",
    "gelu",
    "gelu_tanh",
    "leaky_relu",
    "elu",
    "relu6",
]


class Standalone(torch.nn.Module):
    """Each activation of `names` applied to the graph input: standalone kernels (one lowering for
    all of them keeps the test fast)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.acts = [ACTIVATIONS[name][0] for name in names]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(act(x) for act in self.acts)


def _inputs(shape: list[int]) -> torch.Tensor:
    torch.manual_seed(len(shape) * 31 + shape[-1])
    # Spread over the interesting ranges: hardswish's knees at +-3, saturation of sigmoid/tanh.
    return torch.randn(*shape) * 4.0


def _check(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> list[str]:
    out_opt, out_ref, placement = run_both(model, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    expected_list = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(out_opt) == len(out_ref) == len(expected_list)
    for got, ref, want in zip(out_opt, out_ref, expected_list, strict=True):
        assert_close_scaled(got, ref)
        assert_close_scaled(got, want)
        assert_close_scaled(ref, want)
    return placement


def _assert_placed(placement: list[str], names: list[str], where: str) -> None:
    for name in names:
        kernel = ACTIVATIONS[name][1]
        lines = placed(placement, kernel, where)
        assert lines, (name, placement)


@pytest.mark.parametrize("shape", [[7], [3, 5], [2, 3, 7, 9], [1, 24, 56, 57]])
def test_standalone_activations_run_on_the_provider(shape: list[int]) -> None:
    names = sorted(ACTIVATIONS)
    placement = _check(Standalone(names).eval(), (_inputs(shape),))
    _assert_placed(placement, names, "Optimized")
    assert not [line for line in placement if "declined" in line], placement


def test_large_activation_is_split_into_pieces() -> None:
    placement = _check(Standalone(["silu"]).eval(), (_inputs([1, 64, 112, 112]),))
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    if "work sharing" in summary:
        assert "1 ops split" in summary, summary


class ConvActs(torch.nn.Module):
    """conv_i -> act_i for each activation: each rides on its convolution as a post-op."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(5, 7, 3, padding=1) for _ in names)
        self.acts = [ACTIVATIONS[name][0] for name in names]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(act(conv(x)) for conv, act in zip(self.convs, self.acts, strict=True))


def test_activations_after_convolutions_are_fused() -> None:
    torch.manual_seed(1)
    placement = _check(ConvActs(FUSED).eval(), (torch.randn(2, 5, 11, 13),))
    _assert_placed(placement, FUSED, "fused into")


def test_activations_after_linears_are_fused() -> None:
    names = ["hardswish", "silu", "gelu", "tanh", "sigmoid"]

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fcs = torch.nn.ModuleList(torch.nn.Linear(19, 33) for _ in names)
            self.acts = [ACTIVATIONS[name][0] for name in names]

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(act(fc(x)) for fc, act in zip(self.fcs, self.acts, strict=True))

    torch.manual_seed(2)
    placement = _check(Net().eval(), (torch.randn(5, 19),))
    _assert_placed(placement, names, "fused into")


class Branches(torch.nn.Module):
    """Each activation's input is also read by another convolution, so it cannot be fused: it runs
    standalone on the channels-last activation the convolution leaves, writing channels-last for
    the next convolution (or plain where it is a graph output)."""

    def __init__(self, names: list[str], output_act: bool) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(6, 16, 3, padding=1)
        self.conv2 = torch.nn.ModuleList(torch.nn.Conv2d(16, 8, 1) for _ in names)
        self.conv3 = torch.nn.Conv2d(16, 8, 1)
        self.acts = [ACTIVATIONS[name][0] for name in names]
        self.output_act = output_act

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.conv1(x)
        if self.output_act:
            return (*(act(y) for act in self.acts), self.conv3(y))
        return tuple(
            conv(act(y)) + self.conv3(y) for conv, act in zip(self.conv2, self.acts, strict=True)
        )


@pytest.mark.parametrize("output_act", [False, True])
def test_unfused_activations_on_channels_last_data(output_act: bool) -> None:
    names = ["hardswish", "silu", "sigmoid", "gelu", "hardsigmoid", "elu"]
    torch.manual_seed(3)
    placement = _check(Branches(names, output_act).eval(), (torch.randn(1, 6, 15, 17),))
    _assert_placed(placement, names, "Optimized(oneDNN)")
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    assert " 0 activations kept channels-last" not in summary, summary


def test_mobilenet_v3_block_with_hardswish_is_one_kernel() -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.expand = torch.nn.Conv2d(16, 64, 1)
            self.depthwise = torch.nn.Conv2d(64, 64, 5, padding=2, groups=64)
            self.project = torch.nn.Conv2d(64, 16, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = F.hardswish(self.expand(x))
            h = F.hardswish(self.depthwise(h))
            return self.project(h) + x

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.block = Block()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.block(F.hardswish(self.stem(x)))

    torch.manual_seed(4)
    placement = _check(Net().eval(), (torch.randn(1, 3, 20, 20),))
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    assert "1 inverted residual blocks fused" in summary, summary
    assert len(placed(placement, "aten::hardswish.out", "fused into")) == 3, placement


def test_float64_activations_still_lower_by_decomposition() -> None:
    names = ["hardswish", "silu", "hardsigmoid"]
    loader.load_cpu_backend()
    model = Standalone(names).eval()
    x = torch.randn(2, 9, dtype=torch.float64) * 4
    partitioner = CpuPartitioner()
    edge = to_edge_transform_and_lower(torch.export.export(model, (x,)), partitioner=[partitioner])
    nodes = edge.exported_program().graph.nodes
    targets = [str(n.target) for n in nodes if n.op == "call_function"]
    assert not [t for t in targets if any(name in t for name in names)], targets
    pte = bytes(edge.to_executorch().buffer)
    module = portable_lib._load_for_executorch_from_buffer(pte)
    for got, want in zip(module.forward([x]), model(x), strict=True):
        torch.testing.assert_close(got, want)


def test_float32_and_float64_in_one_model() -> None:
    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return F.hardswish(x), F.hardswish(y)

    loader.load_cpu_backend()
    x, y = torch.randn(4, 5) * 4, torch.randn(4, 5, dtype=torch.float64) * 4
    partitioner = CpuPartitioner()
    edge = to_edge_transform_and_lower(
        torch.export.export(Net(), (x, y)), partitioner=[partitioner]
    )
    pte = bytes(edge.to_executorch().buffer)
    module = portable_lib._load_for_executorch_from_buffer(pte)
    got_x, got_y = module.forward([x, y])
    assert_close_scaled(got_x, F.hardswish(x))
    torch.testing.assert_close(got_y, F.hardswish(y))
    assert placed(loader.last_placement(), "aten::hardswish.out", "Optimized"), (
        loader.last_placement()
    )
