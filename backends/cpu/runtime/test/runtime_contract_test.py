"""The C++ runtime against hand-built payloads in real `.pte` programs on ExecuTorch's runtime.

Covers what the AOT writer never produces on purpose: exact integer I/O through the kernels, a
run-time dtype mismatch, the arena planner's reuse, binding `Tensor?[]` from a plain tensor list,
and init errors (never crashes) for corrupted or hostile payloads.
"""

from typing import Any

import pytest
import torch

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.handmade_payload import (
    CONSTANT,
    INPUT,
    INTERMEDIATE,
    OPTIONAL_TENSOR_LISTS,
    OUTPUT,
    Graph,
    Op,
    Value,
    add_graph,
    int_,
    load_program,
    optional_tensor_list,
    program,
    tensor,
    tensor_list,
)


@pytest.fixture(scope="module", autouse=True)
def _runtime() -> None:
    loader.load_cpu_backend()


def _add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def test_int64_above_2_pow_53_is_exact() -> None:
    x = torch.tensor([2**60 + 1, -(2**62) + 3, 2**53 + 1, 7])
    y = torch.tensor([2**60 + 3, 2**61 - 1, 1, -(2**63)])
    module = load_program(program(_add, (x, y), add_graph(torch.int64, [4])))
    (out,) = module.forward([x, y])
    assert out.dtype == torch.int64
    assert torch.equal(out, x + y)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32])
def test_small_integer_add_wraps_like_eager(dtype: torch.dtype) -> None:
    info = torch.iinfo(dtype)
    x = torch.tensor([info.max, info.min, info.max - 1, 3], dtype=dtype)
    y = torch.tensor([1, -1 if info.min < 0 else 255, 5, info.max], dtype=dtype)
    module = load_program(program(_add, (x, y), add_graph(dtype, [4])))
    (out,) = module.forward([x, y])
    assert out.dtype == dtype
    assert torch.equal(out, x + y)


def test_dtype_mismatch_at_run_time_names_argument_and_dtypes() -> None:
    # The outer program hands the delegate int32 tensors; the payload was serialized for int64.
    x = torch.tensor([1, 2, 3], dtype=torch.int32)
    y = torch.tensor([4, 5, 6], dtype=torch.int32)  # distinct: export merges identical inputs
    module = load_program(program(_add, (x, y), add_graph(torch.int64, [3])))
    with pytest.raises(RuntimeError):
        module.forward([x, y])
    message = loader.last_error()
    assert "input 0" in message
    assert "expected dtype int64 shape [3]" in message
    assert "got dtype int32 shape [3]" in message


def test_shape_mismatch_at_run_time_is_an_error() -> None:
    x, y = torch.ones(2, 3), torch.zeros(2, 3)
    module = load_program(program(_add, (x, y), add_graph(torch.float32, [3, 2])))
    with pytest.raises(RuntimeError):
        module.forward([x, y])
    assert "expected dtype float32 shape [3, 2], got dtype float32 shape [2, 3]" in (
        loader.last_error()
    )


def _neg(value_in: int, value_out: int) -> Op:
    return Op("aten::neg.out", [tensor(value_in), tensor(value_out)])


def test_arena_reuses_buffers_whose_lifetimes_do_not_overlap() -> None:
    # x -> t1 -> t2 -> t3 -> t4 -> out: at most two intermediates are alive at once.
    n = 1024
    values = [Value(torch.float32, [n], INPUT)]
    values += [Value(torch.float32, [n], INTERMEDIATE) for _ in range(4)]
    values += [Value(torch.float32, [n], OUTPUT)]
    graph = Graph(values, [0], [5], [_neg(i, i + 1) for i in range(5)])
    x = torch.randn(n)
    module = load_program(program(lambda a: -a, (x,), graph))
    (out,) = module.forward([x])  # the method (and the delegate's init) loads on first use
    assert torch.equal(out, -x)  # five negations
    assert loader.last_arena_bytes() == 2 * n * 4


def test_constants_come_from_the_named_data_map() -> None:
    weight = torch.arange(6, dtype=torch.int64).reshape(2, 3) * (2**55)
    graph = Graph(
        values=[
            Value(torch.int64, [2, 3], INPUT),
            Value(torch.int64, [2, 3], CONSTANT, constant_key="w"),
            Value(torch.int64, [2, 3], OUTPUT),
        ],
        inputs=[0],
        outputs=[2],
        ops=[Op("aten::add.out", [tensor(0), tensor(1), int_(1), tensor(2)])],
        constants={"w": weight.numpy().tobytes()},
    )
    x = torch.full((2, 3), 2**54 + 1, dtype=torch.int64)
    module = load_program(program(lambda a: a + a, (x,), graph))
    (out,) = module.forward([x])
    assert torch.equal(out, x + weight)


def _index_graph(indices: Any, flags: int) -> Graph:
    return Graph(
        values=[
            Value(torch.float32, [4, 5], INPUT),
            Value(torch.int64, [3], INPUT),
            Value(torch.float32, [4, 3], OUTPUT),
        ],
        inputs=[0, 1],
        outputs=[2],
        ops=[Op("aten::index.Tensor_out", [tensor(0), indices, tensor(2)], flags=flags)],
    )


def test_plain_tensor_list_binds_as_optional_tensors_for_index() -> None:
    x = torch.randn(4, 5)
    idx = torch.tensor([4, 0, 2])
    # x[:, idx] written as [None, idx] (optional list) and as [x-dim-0-less] plain list below.
    graph = _index_graph(optional_tensor_list([-1, 1]), OPTIONAL_TENSOR_LISTS)
    module = load_program(program(lambda a, i: a[:, i], (x, idx), graph))
    (out,) = module.forward([x, idx])
    assert torch.equal(out, x[:, idx])

    plain = Graph(
        values=[
            Value(torch.float32, [4, 5], INPUT),
            Value(torch.int64, [3], INPUT),
            Value(torch.float32, [3, 5], OUTPUT),
        ],
        inputs=[0, 1],
        outputs=[2],
        ops=[
            Op(
                "aten::index.Tensor_out",
                [tensor(0), tensor_list([1]), tensor(2)],
                flags=OPTIONAL_TENSOR_LISTS,
            )
        ],
    )
    idx = torch.tensor([3, 3, 1])
    module = load_program(program(lambda a, i: a[i], (x, idx), plain))
    (out,) = module.forward([x, idx])
    assert torch.equal(out, x[idx])


def test_every_route_in_the_route_table_binds() -> None:
    from backends.cpu.routes import ROUTES

    unbindable = {
        route.kernel: loader.kernel_status(route.kernel)
        for route in ROUTES.values()
        if loader.kernel_status(route.kernel) != "ok"
    }
    assert not unbindable
    assert loader.kernel_status("aten::no_such_op.out") == "no out-variant schema"
    assert loader.kernel_status("aten::hypot.out") == "not in the operator registry"


@pytest.mark.parametrize(
    "provider, why",
    [
        (1, "declined by Optimized(oneDNN): add: only float32 tensors"),
        (7, "declined by a missing provider"),
    ],
)
def test_route_on_a_declining_or_absent_provider_falls_back_to_reference(
    provider: int, why: str
) -> None:
    # Provider.Optimized (1, oneDNN) takes float32 adds only, so it declines this int64 add; id 7
    # has no provider in this build: Reference takes the op either way (exactly, no float32 on the
    # way), and the placement log says why.
    graph = add_graph(torch.int64, [2])
    graph.ops[0].provider = provider
    x, y = torch.tensor([2**62, -1]), torch.tensor([5, 2**60])
    module = load_program(program(_add, (x, y), graph))
    (out,) = module.forward([x, y])
    assert torch.equal(out, x + y)
    line = loader.last_placement()[0]  # the add (a provider session adds a summary line)
    assert "aten::add.out: Reference" in line and why in line, line


def test_intermediate_listed_as_output_keeps_its_arena_slot_to_the_end() -> None:
    # t1 = x + x is also a graph output; t3, produced after t1's last reader, must not reuse its
    # bytes, since outputs that are not Output values are copied out after the last op.
    n = 8

    def doubled(value_in: int, value_out: int) -> Op:
        return Op("aten::add.out", [tensor(value_in), tensor(value_in), int_(1), tensor(value_out)])

    values = [Value(torch.int64, [n], INPUT)]
    values += [Value(torch.int64, [n], INTERMEDIATE) for _ in range(3)]
    values += [Value(torch.int64, [n], OUTPUT)]
    graph = Graph(values, [0], [1, 4], [doubled(i, i + 1) for i in range(4)])
    x = torch.arange(n) + 2**40
    module = load_program(program(lambda a: (a + a, a - a), (x,), graph))
    first, last = module.forward([x])
    assert torch.equal(first, 2 * x)
    assert torch.equal(last, 16 * x)
