"""Bad input gives a clear error naming what and where: preprocess and the payload reader."""

import flatbuffers
import pytest
import torch
from executorch.exir import to_edge
from torch.export import Dim

from backends.cpu.cpu_backend import CpuBackend
from backends.cpu.serialization.graph_reader import PayloadError, read_payload
from backends.cpu.serialization.graph_writer import SerializationError
from backends.cpu.serialization.schema import FILE_IDENTIFIER, FORMAT_VERSION, fb


class _Widen(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * x.to(torch.float64).sum().to(torch.float32)


class _Erf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.atan(x + 1.0)


class _Dynamic(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def _edge(model: torch.nn.Module, *inputs: torch.Tensor, **kwargs: object) -> object:
    return to_edge(torch.export.export(model, inputs, **kwargs)).exported_program()  # type: ignore[arg-type]


def test_unsupported_dtype_names_the_node() -> None:
    program = _edge(_Widen(), torch.randn(3))
    with pytest.raises(
        SerializationError, match=r"node '\w+' \(\S+\): unsupported dtype torch.float64"
    ):
        CpuBackend.preprocess(program, [])  # type: ignore[arg-type]


def test_op_without_route_names_the_node() -> None:
    program = _edge(_Erf(), torch.randn(3))
    with pytest.raises(SerializationError, match=r"node 'aten_atan_default' .*no CPU route"):
        CpuBackend.preprocess(program, [])  # type: ignore[arg-type]


def test_dynamic_shape_names_the_node() -> None:
    program = _edge(_Dynamic(), torch.randn(4, 3), dynamic_shapes=({0: Dim("n", min=2)},))
    with pytest.raises(SerializationError, match=r"node 'x'.*symbol s\d+ has no upper bound"):
        CpuBackend.preprocess(program, [])  # type: ignore[arg-type]


def test_compile_specs_are_rejected() -> None:
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    program = _edge(_Dynamic(), torch.randn(2))
    with pytest.raises(ValueError, match="no compile specs, got: threads"):
        CpuBackend.preprocess(program, [CompileSpec("threads", b"2")])  # type: ignore[arg-type]


def _payload(version: int = FORMAT_VERSION, input_id: int = 0) -> bytes:
    value = fb.ValueT()
    value.dtype, value.shape, value.kind, value.name = 6, [2], 1, "x"
    graph = fb.GraphT()
    graph.version, graph.values, graph.inputs, graph.outputs, graph.ops = (
        version,
        [value],
        [input_id],
        [],
        [],
    )
    builder = flatbuffers.Builder(64)
    builder.Finish(graph.Pack(builder), FILE_IDENTIFIER)
    return bytes(builder.Output())


def test_reader_accepts_a_minimal_payload() -> None:
    graph = read_payload(_payload())
    assert graph.inputs == (0,) and graph.values[0].shape == (2,)


def test_reader_rejects_foreign_bytes() -> None:
    with pytest.raises(PayloadError, match="file identifier"):
        read_payload(b"\x00" * 16)


def test_reader_rejects_other_format_versions() -> None:
    with pytest.raises(PayloadError, match=f"version {FORMAT_VERSION + 1}, this reader reads"):
        read_payload(_payload(version=FORMAT_VERSION + 1))


def test_reader_rejects_out_of_range_value_ids() -> None:
    with pytest.raises(PayloadError, match=r"inputs: value id 5 out of range \[0, 1\)"):
        read_payload(_payload(input_id=5))
