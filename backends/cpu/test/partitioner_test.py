"""CpuPartitioner: what it claims, what it leaves out and why."""

import operator

import torch
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower
from torch.export import Dim

from backends.cpu.partition.cpu_partitioner import CpuPartitioner, LeaveOutReason
from backends.cpu.routes import op_key
from backends.cpu.serialization.graph_reader import cpu_payloads, read_payload
from backends.cpu.test.models import (
    IndexHeavy,
    SmallCNN,
    cnn_inputs,
    index_heavy_inputs,
    randomize_batch_norm,
)


def _lower(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], **export_kwargs: object
) -> tuple[EdgeProgramManager, CpuPartitioner]:
    partitioner = CpuPartitioner()
    program = torch.export.export(model, inputs, **export_kwargs)  # type: ignore[arg-type]
    return to_edge_transform_and_lower(program, partitioner=[partitioner]), partitioner


def _outer_ops(edge: EdgeProgramManager) -> list[str]:
    """Ops left in the outer program, besides the delegate calls and their getitems."""
    return [
        str(op_key(node.target))
        for node in edge.exported_program().graph.nodes
        if node.op == "call_function"
        and node.target is not operator.getitem
        and node.target is not torch.ops.higher_order.executorch_call_delegate
    ]


def test_float_cnn_is_delegated_whole() -> None:
    edge, partitioner = _lower(randomize_batch_norm(SmallCNN()), cnn_inputs())
    assert _outer_ops(edge) == []
    assert partitioner.report.left_out == ()
    assert partitioner.report.partitions == 1
    (payload,) = cpu_payloads(edge.exported_program())
    routes = read_payload(payload).routes()
    # aten.linear reached the delegate whole (ops_to_not_decompose), not as permute + addmm.
    assert "aten.linear.default" in routes and "aten.addmm.default" not in routes
    assert "aten.convolution.default" in routes


def test_integer_model_is_delegated_whole() -> None:
    edge, partitioner = _lower(IndexHeavy(), index_heavy_inputs())
    assert _outer_ops(edge) == []
    assert partitioner.report.left_out == ()
    graph = read_payload(cpu_payloads(edge.exported_program())[0])
    for route in ("aten.argmax.default", "aten.index.Tensor", "aten.index_put.default"):
        assert route in graph.routes()
    dtypes = {graph.values[i].dtype for i in graph.outputs}
    assert dtypes == {torch.int64, torch.bool}  # integer and mask outputs stay in the delegate


class _DynamicThenStatic(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        summed = (x * 2.0).sum(0)  # dynamic input, static output
        return torch.relu(summed + y)


def test_unbounded_dim_leaves_out_exactly_the_dynamic_nodes() -> None:
    inputs = (torch.randn(4, 3), torch.randn(3))
    edge, partitioner = _lower(
        _DynamicThenStatic(), inputs, dynamic_shapes=({0: Dim("batch", min=2)}, None)
    )
    report = partitioner.report
    assert all("has no upper bound" in node.detail for node in report.left_out), report
    left_out = {node.op: node.reason for node in report.left_out}
    assert left_out == {
        "aten.mul.Tensor": LeaveOutReason.DYNAMIC_SHAPE,
        "aten.sum.dim_IntList": LeaveOutReason.DYNAMIC_SHAPE,
    }
    assert len(report.claimed) == 2  # add and relu
    assert sorted(_outer_ops(edge)) == ["aten.mul.Tensor", "aten.sum.dim_IntList"]


class _QuantizeRoundTrip(torch.nn.Module):
    def __init__(self, dtype: torch.dtype, low: int, high: int) -> None:
        super().__init__()
        self.scheme = (dtype, low, high)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype, low, high = self.scheme
        q = torch.ops.quantized_decomposed.quantize_per_tensor(
            torch.relu(x), 0.05, 0, low, high, dtype
        )
        dq = torch.ops.quantized_decomposed.dequantize_per_tensor(q, 0.05, 0, low, high, dtype)
        return dq + 1.0


def test_int8_quantize_ops_are_claimed_int16_left_out_as_quantized() -> None:
    import executorch.exir.passes.quant_fusion_pass  # noqa: F401  registers quantized_decomposed

    _, partitioner = _lower(_QuantizeRoundTrip(torch.int8, -128, 127), (torch.randn(2, 8),))
    assert not partitioner.report.left_out, partitioner.report
    assert len(partitioner.report.claimed) == 4 and partitioner.report.partitions == 1

    _, partitioner = _lower(_QuantizeRoundTrip(torch.int16, -32768, 32767), (torch.randn(2, 8),))
    left_out = {node.op: node for node in partitioner.report.left_out}
    assert set(left_out) == {
        "quantized_decomposed.quantize_per_tensor.default",
        "quantized_decomposed.dequantize_per_tensor.default",
    }
    for node in left_out.values():
        assert node.reason == LeaveOutReason.QUANTIZED and "torch.int16" in node.detail, node
    assert len(partitioner.report.claimed) == 2  # relu and add
    assert partitioner.report.partitions == 2


class _Mixed(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wide = x.to(torch.float64) * 3.0  # float64: outside the supported dtypes
        return torch.atan(x) + 1.0, wide  # atan: no route


def test_unsupported_dtype_and_unrouted_op_get_their_reasons() -> None:
    _, partitioner = _lower(_Mixed(), (torch.randn(3, 4),))
    reasons = {node.op: node.reason for node in partitioner.report.left_out}
    assert reasons["aten.atan.default"] == LeaveOutReason.NO_ROUTE
    assert reasons["aten.mul.Tensor"] == LeaveOutReason.DTYPE
    # The float64 cast produces a float64 tensor: left out for its dtype, not for lack of a route.
    cast = [n for n in partitioner.report.left_out if "to" in n.op and "copy" in n.op]
    assert cast and all(n.reason == LeaveOutReason.DTYPE for n in cast)
    assert [name for name in partitioner.report.claimed if name.startswith("aten_add")]
    text = str(partitioner.report)
    assert "aten.atan.default" in text and "no route" in text


class _ChannelsLast(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x.to(memory_format=torch.channels_last)))
        return y.contiguous() + 1.0


def test_channels_last_tensors_are_left_out_for_layout() -> None:
    # The payload describes contiguous tensors only; the contiguous tail is still claimed.
    edge, partitioner = _lower(_ChannelsLast(), (torch.randn(1, 3, 4, 4),))
    reasons = {node.op: node.reason for node in partitioner.report.left_out}
    assert reasons == {
        "dim_order_ops._to_dim_order_copy.default": LeaveOutReason.LAYOUT,
        "aten.convolution.default": LeaveOutReason.LAYOUT,
        "aten.relu.default": LeaveOutReason.LAYOUT,
        "dim_order_ops._clone_dim_order.default": LeaveOutReason.LAYOUT,
    }
    assert len(partitioner.report.claimed) == 1
    assert read_payload(cpu_payloads(edge.exported_program())[0]).routes() == ["aten.add.Tensor"]


class _Pads(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nn.functional.pad(x, (1, 1)), torch.nn.functional.pad(x, (0, -1, 1, 0))


def test_arguments_outside_the_kernel_are_left_out() -> None:
    # ExecuTorch's constant_pad_nd pads but does not crop: a negative pad would fail at run time.
    _, partitioner = _lower(_Pads(), (torch.randn(2, 3, 4),))
    (left_out,) = partitioner.report.left_out
    assert left_out.op == "aten.constant_pad_nd.default"
    assert left_out.reason == LeaveOutReason.ARGUMENTS
    assert "negative padding" in left_out.detail
    assert len(partitioner.report.claimed) == 1
