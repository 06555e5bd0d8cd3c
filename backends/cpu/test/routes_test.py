"""The route table: every route resolves, its kernel is registered, and enums mirror schema.fbs."""

import executorch.kernels.quantized  # noqa: F401  (quantized kernels, as loader.load_cpu_backend)
import pytest
import torch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.extension.pybindings import portable_lib

from backends.cpu.routes import (
    BUILTIN_KERNELS,
    PROVIDER_KERNELS,
    ROUTES,
    Provider,
    Route,
    RouteFlag,
    op_key,
    ops_to_keep_undecomposed,
    route_for,
)
from backends.cpu.serialization.graph_reader import ValueKind
from backends.cpu.serialization.graph_writer import SUPPORTED_DTYPES
from backends.cpu.serialization.schema import fb


@pytest.mark.parametrize("route", list(ROUTES.values()), ids=list(ROUTES))
def test_route_resolves_and_its_kernel_is_registered(route: Route) -> None:
    namespace, name, overload = route.op.split(".")
    edge_op = getattr(getattr(getattr(exir_ops.edge, namespace), name), overload)
    assert op_key(edge_op) == route.op
    assert route_for(edge_op) is route
    # The runtime binds kernels through ExecuTorch's operator registry, as this process has it,
    # or its own built-in kernels for the few the registry lacks, or (the int8 ops) through the
    # Optimized provider only.
    registered = route.kernel in portable_lib._get_operator_names()
    assert registered != (route.kernel in BUILTIN_KERNELS | PROVIDER_KERNELS), route.kernel
    assert [a for a in route.out_variant()._schema.arguments if a.is_out], route.kernel


def test_builtin_kernels_have_routes_and_float32_checks() -> None:
    routed = {route.kernel: route for route in ROUTES.values()}
    for kernel in BUILTIN_KERNELS:
        route = routed[kernel]
        if kernel.startswith("et_cpu_quant::"):  # written by preprocess only, never kept whole
            continue
        assert route.keep_undecomposed and route.check_args is not None, kernel
    kept = ops_to_keep_undecomposed()
    for op in (torch.ops.aten.hardswish, torch.ops.aten.hardsigmoid, torch.ops.aten.silu):
        assert op.default in kept


def test_index_routes_bind_optional_tensor_lists() -> None:
    for key in ("aten.index.Tensor", "aten.index_put.default"):
        assert ROUTES[key].flags & RouteFlag.OPTIONAL_TENSOR_LISTS
    assert not ROUTES["aten.add.Tensor"].flags


def test_linear_is_kept_undecomposed() -> None:
    assert torch.ops.aten.linear.default in ops_to_keep_undecomposed()


def test_non_operators_have_no_route() -> None:
    import operator

    assert op_key(operator.getitem) is None and route_for(operator.getitem) is None
    assert route_for(torch.ops.aten.lgamma.default) is None  # an op without a route


def test_python_enums_mirror_the_schema() -> None:
    assert {p.name: p.value for p in Provider} == {"REFERENCE": 0, "OPTIMIZED": 1}
    assert (fb.Provider.Reference, fb.Provider.Optimized) == (0, 1)
    assert fb.RouteFlags.OptionalTensorLists == RouteFlag.OPTIONAL_TENSOR_LISTS
    assert [fb.ValueKind.Intermediate, fb.ValueKind.Input, fb.ValueKind.Output] == [0, 1, 2]
    assert fb.ValueKind.Constant == ValueKind.CONSTANT
    names = {
        torch.uint8: "UInt8",
        torch.int8: "Int8",
        torch.int16: "Int16",
        torch.int32: "Int32",
        torch.int64: "Int64",
        torch.float32: "Float32",
        torch.bool: "Bool",
    }
    assert {dtype: getattr(fb.DType, names[dtype]) for dtype in names} == SUPPORTED_DTYPES
