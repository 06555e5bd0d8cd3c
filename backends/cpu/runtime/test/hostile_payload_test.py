"""Corrupted, truncated and hostile payloads get an init error naming the problem, never a crash.

Each case is a real `.pte` whose CpuBackend delegate carries the bad payload, loaded and run on
ExecuTorch's runtime with the C++ CPU runtime registered.
"""

from collections.abc import Callable

import flatbuffers
import pytest
import torch

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.handmade_payload import (
    CONSTANT,
    INPUT,
    INTERMEDIATE,
    OPTIONAL_TENSOR_LISTS,
    OUTPUT,
    STATE,
    Graph,
    Op,
    Value,
    add_graph,
    bool_,
    float_,
    int_,
    int_list,
    load_program,
    none,
    payload_bytes,
    program,
    tensor,
)
from backends.cpu.serialization.schema import fb


@pytest.fixture(scope="module", autouse=True)
def _runtime() -> None:
    loader.load_cpu_backend()


def _expect_init_error(graph: Graph | bytes, *fragments: str) -> None:
    x, y = torch.ones(3), torch.zeros(3)
    pte = program(lambda a, b: a + b, (x, y), graph)
    with pytest.raises(RuntimeError):
        module = load_program(pte)
        module.forward([x, y])  # the method, and so the delegate's init, loads on first use
    message = loader.last_error()
    for fragment in fragments:
        assert fragment in message, message


def _adds_constant(key: str) -> Graph:
    """input + constant `key` (absent from the program's named data) -> output."""
    return Graph(
        [
            Value(torch.float32, [3], INPUT),
            Value(torch.float32, [3], CONSTANT, constant_key=key),
            Value(torch.float32, [3], OUTPUT),
        ],
        [0],
        [2],
        [Op("aten::add.out", [tensor(0), tensor(1), int_(1), tensor(2)])],
    )


_VALID = payload_bytes(add_graph(torch.float32, [3]))

_HOSTILE: dict[str, tuple[Callable[[], Graph | bytes], tuple[str, ...]]] = {
    "truncated": (lambda: _VALID[: len(_VALID) // 2], ("not a valid CPU-delegate flatbuffer",)),
    "wrong identifier": (lambda: _VALID[:4] + b"XXXX" + _VALID[8:], ("identifier 'ECP1'",)),
    "empty": (lambda: b"", ("too short",)),
    "future version": (
        lambda: Graph(**{**add_graph(torch.float32, [3]).__dict__, "version": 5}),
        ("format version 5",),
    ),
    "value id out of range": (
        lambda: Graph(
            add_graph(torch.float32, [3]).values,
            [0, 1],
            [2],
            [Op("aten::add.out", [tensor(0), tensor(7), int_(1), tensor(2)])],
        ),
        ("value 7 out of range",),
    ),
    "read before write": (
        lambda: Graph(
            [*add_graph(torch.float32, [3]).values, Value(torch.float32, [3], INTERMEDIATE)],
            [0, 1],
            [2],
            [Op("aten::add.out", [tensor(0), tensor(3), int_(1), tensor(2)])],
        ),
        ("before any op writes it",),
    ),
    "unknown kernel": (
        lambda: Graph(
            add_graph(torch.float32, [3]).values,
            [0, 1],
            [2],
            [Op("aten::no_such_op.out", [tensor(0), tensor(1), tensor(2)])],
        ),
        ("unknown kernel 'aten::no_such_op.out'",),
    ),
    "kernel not registered": (
        lambda: Graph(
            add_graph(torch.float32, [3]).values,
            [0, 1],
            [2],
            [Op("aten::hypot.out", [tensor(0), tensor(1), tensor(2)])],
        ),
        ("not in ExecuTorch's operator registry",),
    ),
    "built-in kernel on int32": (
        lambda: Graph(
            add_graph(torch.int32, [3]).values,
            [0, 1],
            [2],
            [Op("aten::hardswish.out", [tensor(0), tensor(2)])],
        ),
        ("built-in kernel aten::hardswish.out", "float32 only", "Int"),
    ),
    "argument count": (
        lambda: Graph(
            add_graph(torch.float32, [3]).values,
            [0, 1],
            [2],
            [Op("aten::add.out", [tensor(0), tensor(1), tensor(2)])],
        ),
        ("takes 4 arguments", "payload has 3"),
    ),
    "argument kind": (
        lambda: Graph(
            add_graph(torch.float32, [3]).values,
            [0, 1],
            [2],
            [Op("aten::add.out", [tensor(0), int_list([1]), int_(1), tensor(2)])],
        ),
        ("argument 1", "expects kind 'T'"),
    ),
    "None for a required tensor": (
        lambda: Graph(
            add_graph(torch.float32, [3]).values,
            [0, 1],
            [2],
            [Op("aten::add.out", [tensor(0), none(), float_(1.0), tensor(2)])],
        ),
        ("payload has None",),
    ),
    "writes an input": (
        lambda: Graph(
            add_graph(torch.float32, [3]).values,
            [0, 1],
            [2],
            [
                Op("aten::add.out", [tensor(0), tensor(1), int_(1), tensor(2)]),
                Op("aten::add.out", [tensor(0), tensor(1), int_(1), tensor(1)]),
            ],
        ),
        ("graph input or constant",),
    ),
    "output never written": (
        lambda: Graph(add_graph(torch.float32, [3]).values, [0, 1], [2], []),
        ("never written",),
    ),
    "negative dim": (
        lambda: Graph(
            [Value(torch.float32, [3], INPUT)] * 2 + [Value(torch.float32, [-3], OUTPUT)],
            [0, 1],
            [2],
            [Op("aten::add.out", [tensor(0), tensor(1), int_(1), tensor(2)])],
        ),
        ("invalid size -3",),
    ),
    "rank 17": (
        lambda: Graph(
            [Value(torch.float32, [3], INPUT)] * 2 + [Value(torch.float32, [1] * 17, OUTPUT)],
            [0, 1],
            [2],
            [],
        ),
        ("rank 17",),
    ),
    "huge intermediate": (
        lambda: Graph(
            [
                *add_graph(torch.float32, [3]).values,
                Value(torch.float32, [2**30, 2**30], INTERMEDIATE),
            ],
            [0, 1],
            [2],
            [Op("aten::add.out", [tensor(0), tensor(1), int_(1), tensor(2)])],
        ),
        ("more than 2^31 elements",),
    ),
    "unsupported dtype": (
        lambda: Graph(
            [Value(torch.float32, [3], INPUT)] * 2 + [Value(7, [3], OUTPUT)],
            [0, 1],
            [2],
            [],
        ),
        ("unsupported dtype 7",),
    ),
    "missing constant": (lambda: _adds_constant("absent"), ("key 'absent'", "named data map")),
    "flag without Tensor?[]": (
        lambda: Graph(
            add_graph(torch.float32, [3]).values,
            [0, 1],
            [2],
            [
                Op(
                    "aten::add.out",
                    [tensor(0), tensor(1), int_(1), tensor(2)],
                    flags=OPTIONAL_TENSOR_LISTS,
                )
            ],
        ),
        ("optional_tensor_lists",),
    ),
    # Issue 22 (pte_fuzz case cnn:0:74): a key that is not UTF-8 reached ET_LOG, whose Python
    # sink threw through C++ and aborted the process. Every byte outside ASCII is escaped now.
    "key not UTF-8": (
        lambda: payload_bytes(_adds_constant("absentZZ")).replace(b"absentZZ", b"absent\xff\xfe"),
        ("key 'absent\\xff\\xfe'",),
    ),
}


@pytest.mark.parametrize("case", sorted(_HOSTILE))
def test_bad_payload_is_an_init_error_naming_the_problem(case: str) -> None:
    build, fragments = _HOSTILE[case]
    _expect_init_error(build(), *fragments)


def _conv_graph(
    stride: int, padding: int, dilation: int, groups: int, weight_channels: int = 1
) -> Graph:
    """x [1, 1, 4, 4] conv w [1, 1, 1, 1] -> [1, 1, 4, 4] on the Reference provider (ExecuTorch's
    kernel), with the given window arguments."""
    x, w, out = [1, 1, 4, 4], [1, weight_channels, 1, 1], [1, 1, 4, 4]
    return Graph(
        [
            Value(torch.float32, x, INPUT),
            Value(torch.float32, w, INPUT),
            Value(torch.float32, out, OUTPUT),
        ],
        [0, 1],
        [2],
        [
            Op(
                "aten::convolution.out",
                [
                    tensor(0),
                    tensor(1),
                    none(),
                    int_list([stride, stride]),
                    int_list([padding, padding]),
                    int_list([dilation, dilation]),
                    bool_(False),
                    int_list([0, 0]),
                    int_(groups),
                    tensor(2),
                ],
                name="conv",
            )
        ],
    )


# Issue 22 (pte_fuzz case two_delegates:0:558): zeros written over a convolution's groups reached
# ExecuTorch's convolution kernel, whose argument check divides by groups (SIGFPE). The
# Reference provider checks window arguments before binding (argument_checks.cc).
@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ((1, 0, 1, 0), "groups is 0, must be at least 1"),
        ((0, 0, 1, 1), "stride[0] is 0, must be at least 1"),
        ((1, -1, 1, 1), "padding[0] is -1, must be at least 0"),
        ((1, 0, 0, 1), "dilation[0] is 0, must be at least 1"),
    ],
)
def test_convolution_window_arguments_are_checked_before_the_kernel_runs(
    arguments: tuple[int, int, int, int], fragment: str
) -> None:
    x, w = torch.ones(1, 1, 4, 4), torch.ones(1, 1, 1, 1)
    pte = program(lambda a, b: torch.nn.functional.conv2d(a, b), (x, w), _conv_graph(*arguments))
    with pytest.raises(RuntimeError):
        load_program(pte).forward([x, w])
    assert "op conv (aten::convolution.out): " + fragment in loader.last_error()


# Issue 22 (pte_fuzz case cnn:0:1643): a damaged intermediate shape gave a convolution 8388360
# input channels for a weight of 8; oneDNN's weight reorder read far past the weights (SIGSEGV).
# The Optimized provider declines such a conv; the Reference provider refuses it at init.
def test_convolution_weight_must_fit_the_input_channels() -> None:
    x, w = torch.ones(1, 1, 4, 4), torch.ones(1, 1, 1, 1)
    graph = _conv_graph(1, 0, 1, 1, weight_channels=2)
    pte = program(lambda a, b: torch.nn.functional.conv2d(a, b), (x, w), graph)
    with pytest.raises(RuntimeError):
        load_program(pte).forward([x, torch.ones(1, 2, 1, 1)])
    assert "weight channels 2 x groups 1 do not match input channels 1" in loader.last_error()


# A hostile groups of 2^62 + 1 with 4 input and 4 weight channels: the check multiplied weight
# channels by groups, which overflowed int64 back to 4 and passed (a crash the payload fuzzer
# found once the check ran under UBSan). The check now divides.
_OVERFLOWING_GROUPS = 2**62 + 1


def _wide_conv_graph(groups: int, transposed: bool, provider: int) -> Graph:
    """x [1, 4, 4, 4] conv w [4, 4, 1, 1] -> [1, 4, 4, 4] with the given groups, asked of the
    given provider (the Optimized one declines to the Reference one, which refuses)."""
    graph = _conv_graph(1, 0, 1, groups, weight_channels=4)
    graph.values[0].shape = [1, 4, 4, 4]
    graph.values[1].shape = [4, 4, 1, 1]
    graph.values[2].shape = [1, 4, 4, 4]
    graph.ops[0].args[6] = bool_(transposed)
    graph.ops[0].provider = provider
    return graph


@pytest.mark.parametrize("provider", [fb.Provider.Reference, fb.Provider.Optimized])
@pytest.mark.parametrize("transposed", [False, True])
def test_overflowing_groups_is_an_init_error(transposed: bool, provider: int) -> None:
    x, w = torch.ones(1, 4, 4, 4), torch.ones(4, 4, 1, 1)
    graph = _wide_conv_graph(_OVERFLOWING_GROUPS, transposed, provider)
    pte = program(lambda a, b: torch.nn.functional.conv2d(a, b), (x, w), graph)
    with pytest.raises(RuntimeError):
        load_program(pte).forward([x, w])
    assert f"weight channels 4 x groups {_OVERFLOWING_GROUPS} do not match input channels 4" in (
        loader.last_error()
    )


def test_valid_convolution_arguments_still_run() -> None:
    x, w = torch.arange(16.0).reshape(1, 1, 4, 4), torch.full((1, 1, 1, 1), 2.0)
    pte = program(lambda a, b: torch.nn.functional.conv2d(a, b), (x, w), _conv_graph(1, 0, 1, 1))
    (result,) = load_program(pte).forward([x, w])
    assert torch.equal(result, x * 2)


def _dynamic_add(
    version: int = 3, low: int = 1, high: int = 3, dim_max: int = 3, static_rank: bool = False
) -> Callable[[], bytes]:
    """The add graph with dimension 0 of every value symbolic (`s` in [low, high])."""

    def build() -> bytes:
        graph = fb.GraphT.InitFromPackedBuf(payload_bytes(add_graph(torch.float32, [3])), 0)
        graph.version = version
        symbol = fb.SymbolT()
        symbol.name, symbol.min, symbol.max = "s", low, high
        graph.symbols = [symbol]
        for value in graph.values:
            expr = fb.SymExprT()
            expr.offset, expr.symbols, expr.coeffs = (3, [], []) if static_rank else (0, [0], [1])
            value.dimMin, value.dimMax, value.dimExprs = [low], [dim_max], [expr]
        builder = flatbuffers.Builder(1024)
        builder.Finish(graph.Pack(builder), b"ECP1")
        return bytes(builder.Output())

    return build


_HOSTILE_DYNAMIC: dict[str, tuple[Callable[[], bytes], tuple[str, ...]]] = {
    "symbol min > max": (_dynamic_add(low=3, high=2, dim_max=2), ("bounds [3, 2]",)),
    "symbol bound too large": (
        _dynamic_add(high=2**40, dim_max=3),
        ("symbol 0 (s)", "<= 2147483647"),
    ),
    "dim max not the size": (_dynamic_add(dim_max=2), ("dimension 0", "recorded size 3")),
    "static dim with bounds": (
        _dynamic_add(static_rank=True),
        ("static size 3 but bounds [1, 3]",),
    ),
    "symbols in version 2": (_dynamic_add(version=2), ("need version 3",)),
}


@pytest.mark.parametrize("case", sorted(_HOSTILE_DYNAMIC))
def test_bad_dynamic_bounds_are_an_init_error_naming_the_problem(case: str) -> None:
    build, fragments = _HOSTILE_DYNAMIC[case]
    _expect_init_error(build(), *fragments)


def test_valid_dynamic_payload_runs() -> None:
    x, y = torch.ones(3), torch.full((3,), 2.0)
    module = load_program(program(lambda a, b: a + b, (x, y), _dynamic_add()()))
    (out,) = module.forward([x, y])
    assert torch.equal(out, torch.full((3,), 3.0))


_STATE_BYTES = torch.tensor([10.0, 20.0, 30.0]).numpy().tobytes()


def _state_graph(
    version: int = 4,
    key: str | None = "cpu/state",
    update: int = 3,
    update_shape: tuple[int, ...] = (3,),
    stored: bytes = _STATE_BYTES,
    input_update: int = -1,
) -> Graph:
    """out = a + b + state; the state then takes a + b (value 3), call after call."""
    return Graph(
        [
            Value(torch.float32, [3], INPUT, state_update=input_update),
            Value(torch.float32, [3], INPUT),
            Value(torch.float32, [3], OUTPUT),
            Value(torch.float32, list(update_shape), INTERMEDIATE),
            Value(torch.float32, [3], STATE, constant_key=key, state_update=update),
        ],
        [0, 1],
        [2],
        [
            Op("aten::add.out", [tensor(0), tensor(1), int_(1), tensor(3)]),
            Op("aten::add.out", [tensor(3), tensor(4), int_(1), tensor(2)]),
        ],
        version=version,
        constants={"cpu/state": stored},
    )


_HOSTILE_STATE: dict[str, tuple[Graph, tuple[str, ...]]] = {
    "state in version 3": (
        _state_graph(version=3),
        ("a State value needs payload format version 4",),
    ),
    "state without key": (_state_graph(key=None), ("state value 4 (v4) has no constant_key",)),
    "state key not stored": (_state_graph(key="cpu/other"), ("state v4: key 'cpu/other' not in",)),
    "state bytes short": (_state_graph(stored=_STATE_BYTES[:8]), ("8 bytes stored",)),
    "update out of range": (_state_graph(update=99), ("state_update refers to value 99 of 5",)),
    "update is an input": (_state_graph(update=0), ("value 0 (v0), is not an op result",)),
    "update is the output": (_state_graph(update=2), ("value 2 (v2), is not an op result",)),
    "update never written": (_state_graph(update=4), ("value 4 (v4), is not an op result",)),
    "update of another shape": (
        _state_graph(update_shape=(1, 3)),
        ("has another dtype or shape",),
    ),
    "state_update on an input": (
        _state_graph(input_update=3),
        ("state_update 3 on a value that is not State",),
    ),
}


@pytest.mark.parametrize("case", sorted(_HOSTILE_STATE))
def test_bad_state_entries_are_an_init_error_naming_the_problem(case: str) -> None:
    graph, fragments = _HOSTILE_STATE[case]
    _expect_init_error(graph, *fragments)


def test_valid_state_persists_across_calls() -> None:
    x, y = torch.ones(3), torch.full((3,), 2.0)
    module = load_program(program(lambda a, b: a + b, (x, y), _state_graph()))
    (first,) = module.forward([x, y])
    assert torch.equal(first, torch.tensor([13.0, 23.0, 33.0]))  # the stored initial state
    (second,) = module.forward([x, y * 2])
    assert torch.equal(second, torch.tensor([8.0, 8.0, 8.0]))  # 1 + 4 + the state (1 + 2)
