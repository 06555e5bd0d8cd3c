"""Linears the CPU partitioner leaves out still lower and run (issue 15).

`CpuPartitioner` asks `to_edge` to keep `aten.linear` whole, but only for the linears it will claim:
any other linear (dynamic shape, float64, a neighbour without a route, ...) is decomposed as usual
and runs outside the delegate, while the claimed linears of the same program reach the delegate
whole. Each program is lowered, run on the real runtime and compared with eager.
"""

from collections.abc import Sequence
from typing import Any

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.export import Dim

from backends.cpu.partition.cpu_partitioner import CpuPartitioner, LeaveOutReason
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import ATOL, RTOL
from backends.cpu.serialization.graph_reader import cpu_payloads, read_payload

_BUFFERS: list[bytes] = []  # the runtime does not own a program's buffer (FACTS.md)


def _lower_and_load(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], dynamic_shapes: Any = None
) -> tuple[Any, CpuPartitioner, list[list[str]]]:
    """Lowers with CpuPartitioner (must not raise), loads the .pte; also each payload's routes."""
    loader.load_cpu_backend()
    partitioner = CpuPartitioner()
    exported = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    routes = [read_payload(p).routes() for p in cpu_payloads(edge.exported_program())]
    pte = bytes(edge.to_executorch().buffer)
    _BUFFERS.append(pte)
    return portable_lib._load_for_executorch_from_buffer(pte), partitioner, routes


def _assert_matches_eager(
    module: Any, model: torch.nn.Module, inputs: Sequence[torch.Tensor]
) -> None:
    (actual,) = module.forward(list(inputs))
    with torch.no_grad():
        expected = model(*inputs)
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)


def _reasons(partitioner: CpuPartitioner) -> set[LeaveOutReason]:
    return {node.reason for node in partitioner.report.left_out}


class _DynamicAndStatic(torch.nn.Module):
    """One linear on a dynamic batch (left out), one on a static input (claimed whole)."""

    def __init__(self) -> None:
        super().__init__()
        self.dynamic = torch.nn.Linear(8, 4)
        self.static = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.dynamic(x)).sum(0) + torch.relu(self.static(y)).sum(0)


def test_unbounded_batch_linear_lowers_and_runs_at_every_size() -> None:
    torch.manual_seed(0)
    model = _DynamicAndStatic()
    inputs = (torch.randn(3, 8), torch.randn(2, 8))
    # No upper bound: left out (a bounded batch is delegated, see dynamic_shape_test).
    module, partitioner, routes = _lower_and_load(
        model, inputs, dynamic_shapes=({0: Dim("b", min=1)}, None)
    )
    assert LeaveOutReason.DYNAMIC_SHAPE in _reasons(partitioner)
    # The static linear reached the delegate whole; the dynamic one was decomposed (addmm, outside).
    assert sum(r.count("aten.linear.default") for r in routes) == 1
    assert "aten.addmm.default" in {node.op for node in partitioner.report.left_out}
    for batch in (1, 2, 3):  # unbounded: ExecuTorch plans the program's buffers for the example
        _assert_matches_eager(module, model, (torch.randn(batch, 8), inputs[1]))


class _Float64BesideFloat32(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wide = torch.nn.Linear(6, 5).double()
        self.narrow = torch.nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wide(x.double()).float() + self.narrow(x)


def test_float64_linear_lowers_beside_a_claimed_float32_linear() -> None:
    torch.manual_seed(1)
    model = _Float64BesideFloat32()
    inputs = (torch.randn(4, 6),)
    module, partitioner, routes = _lower_and_load(model, inputs)
    assert LeaveOutReason.DTYPE in _reasons(partitioner)
    assert sum(r.count("aten.linear.default") for r in routes) == 1
    _assert_matches_eager(module, model, inputs)


class _SplitByUnroutedOp(torch.nn.Module):
    """linear -> atan -> linear: atan has no CPU route and splits the graph in two delegates."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.atan(self.first(x)))


def test_linears_around_an_unrouted_op_stay_whole_in_two_delegates() -> None:
    torch.manual_seed(2)
    model = _SplitByUnroutedOp()
    inputs = (torch.randn(5, 8),)
    module, partitioner, routes = _lower_and_load(model, inputs)
    assert [node.op for node in partitioner.report.left_out] == ["aten.atan.default"]
    assert partitioner.report.partitions == 2
    assert [r.count("aten.linear.default") for r in routes] == [1, 1]
    _assert_matches_eager(module, model, inputs)


def test_linear_on_a_channels_last_view_lowers_and_runs() -> None:
    # The linear reads a non-contiguous view: left out whole (layout), decomposed, still correct.
    class LastDimLinear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(5, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.transpose(1, 2))

    torch.manual_seed(3)
    model = LastDimLinear()
    inputs = (torch.randn(2, 5, 4),)
    module, _, _ = _lower_and_load(model, inputs)
    _assert_matches_eager(module, model, inputs)


def test_pt2e_quantized_linear_lowers_and_runs() -> None:
    # A PT2E int8 program: the delegate takes it whole (issue 18: quantize/dequantize routes, the
    # linears as int8 ops) and it runs within one quantization step of the converted model.
    import executorch.kernels.quantized  # noqa: F401  registers the quantized out variants
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    inputs = (torch.randn(3, 8),)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model.eval(), inputs).module(), quantizer)
    for _ in range(4):
        prepared(torch.randn(3, 8))
    converted = convert_pt2e(prepared)
    module, partitioner, _ = _lower_and_load(converted, inputs)
    assert _reasons(partitioner) == set(), str(partitioner.report)
    (actual,) = module.forward(list(inputs))
    expected = converted(*inputs)
    output_scale = (expected.abs().max() / 127).item()
    torch.testing.assert_close(actual, expected, atol=output_scale * 1.01, rtol=0)


# Property: random small linear stacks (dtype, dynamic dims, rank, activations with and without a
# route) always lower, and run like eager.
_ACTIVATIONS = {"none": None, "relu": torch.relu, "atan": torch.atan, "tanh": torch.tanh}


class _LinearStack(torch.nn.Module):
    def __init__(
        self, widths: list[int], activations: list[str], dtypes: list[torch.dtype]
    ) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(n_in, n_out, bias=bool(i % 2 == 0)).to(dtype)
            for i, (n_in, n_out, dtype) in enumerate(zip(widths, widths[1:], dtypes, strict=False))
        )
        self.activations = activations
        self.dtypes = dtypes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, name, dtype in zip(self.layers, self.activations, self.dtypes, strict=False):
            x = layer(x.to(dtype))
            activation = _ACTIVATIONS[name]
            if activation is not None:
                x = activation(x)
        return x.float()


@st.composite
def _stacks(draw: st.DrawFn) -> tuple[_LinearStack, tuple[int, ...], dict[int, Dim]]:
    depth = draw(st.integers(1, 3))
    widths = draw(st.lists(st.integers(1, 12), min_size=depth + 1, max_size=depth + 1))
    activations = draw(
        st.lists(st.sampled_from(sorted(_ACTIVATIONS)), min_size=depth, max_size=depth)
    )
    dtypes = draw(
        st.lists(st.sampled_from([torch.float32, torch.float64]), min_size=depth, max_size=depth)
    )
    leading = draw(st.lists(st.integers(2, 4), min_size=1, max_size=2))
    dynamic = {
        dim: Dim(f"d{dim}", min=1, max=8) for dim in range(len(leading)) if draw(st.booleans())
    }
    return _LinearStack(widths, activations, dtypes), (*leading, widths[0]), dynamic


@settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(_stacks())
def test_generated_linear_stacks_always_lower_and_match_eager(
    case: tuple[_LinearStack, tuple[int, ...], dict[int, Dim]],
) -> None:
    model, shape, dynamic = case
    torch.manual_seed(5)
    inputs = (torch.randn(*shape),)
    module, partitioner, routes = _lower_and_load(
        model, inputs, dynamic_shapes=({**dynamic} or None,) if dynamic else None
    )
    # Every claimed linear node reached the delegate whole: none was claimed as a decomposition.
    claimed_linears = [
        name for name in partitioner.report.claimed if name.startswith("aten_linear")
    ]
    assert len(claimed_linears) == sum(r.count("aten.linear.default") for r in routes)
    _assert_matches_eager(module, model, inputs)
    if dynamic:  # the same .pte at the smallest size of every dynamic dim
        smaller = tuple(1 if dim in dynamic else size for dim, size in enumerate(shape))
        _assert_matches_eager(module, model, (torch.randn(*smaller),))
