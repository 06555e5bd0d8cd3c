"""The int8 ops' payload fields: a hand-built et_cpu_quant::conv2d, ::max_pool2d and ::add run and
match their reference semantics, and every damaged field (scales, zero points, ranges, shapes,
dtypes, pooling sizes, version) is an init error naming the problem, never a crash or a wrong
result."""

import math
from collections.abc import Callable

import pytest
import torch

from backends.cpu import quantized_ops
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.handmade_payload import (
    CONSTANT,
    INPUT,
    OUTPUT,
    Graph,
    Op,
    Value,
    bool_,
    float_,
    int_,
    int_list,
    load_program,
    none,
    program,
    tensor,
)

_SHAPE = [1, 4, 5, 5]
_WEIGHT = torch.tensor(
    [[[[3]], [[-7]], [[12]], [[0]]], [[[-127]], [[5]], [[9]], [[127]]]] * 2, dtype=torch.int8
)  # [4, 4, 1, 1]
_SCALES = torch.tensor([0.01, 0.02, 0.005, 0.03])
_BIAS = torch.tensor([0.1, -0.2, 0.0, 0.3])
_IN = (0.05, 3)  # input scale, zero point
_OUT = (0.04, -5)


def _conv_graph(**change: object) -> Graph:
    """A 1x1 int8 convolution with bias and a fused ReLU; `change` replaces named parts."""
    parts: dict[str, object] = {
        "input_dtype": torch.int8,
        "output_dtype": torch.int8,
        "weight_dtype": torch.int8,
        "scales_shape": [4],
        "groups": 1,
        "stride": [1, 1],
        "input_scale": _IN[0],
        "input_zero_point": _IN[1],
        "output_scale": _OUT[0],
        "output_zero_point": _OUT[1],
        "quant_min": -128,
        "quant_max": 127,
        "output_min": 0.0,
        "output_max": math.inf,
        "version": 2,
        **change,
    }
    values = [
        Value(parts["input_dtype"], _SHAPE, INPUT),  # type: ignore[arg-type]
        Value(parts["weight_dtype"], [4, 4, 1, 1], CONSTANT, constant_key="w"),  # type: ignore[arg-type]
        Value(torch.float32, parts["scales_shape"], CONSTANT, constant_key="s"),  # type: ignore[arg-type]
        Value(torch.float32, [4], CONSTANT, constant_key="b"),
        Value(parts["output_dtype"], _SHAPE, OUTPUT),  # type: ignore[arg-type]
    ]
    args = [
        tensor(0),
        tensor(1),
        tensor(2),
        tensor(3),
        int_list(parts["stride"]),  # type: ignore[arg-type]
        int_list([0, 0]),
        int_list([1, 1]),
        int_(parts["groups"]),  # type: ignore[arg-type]
        float_(parts["input_scale"]),  # type: ignore[arg-type]
        int_(parts["input_zero_point"]),  # type: ignore[arg-type]
        float_(parts["output_scale"]),  # type: ignore[arg-type]
        int_(parts["output_zero_point"]),  # type: ignore[arg-type]
        int_(parts["quant_min"]),  # type: ignore[arg-type]
        int_(parts["quant_max"]),  # type: ignore[arg-type]
        float_(parts["output_min"]),  # type: ignore[arg-type]
        float_(parts["output_max"]),  # type: ignore[arg-type]
        tensor(4),
    ]
    return Graph(
        values=values,
        inputs=[0],
        outputs=[4],
        ops=[Op("et_cpu_quant::conv2d.out", args, route="et_cpu_quant.conv2d.default", provider=1)],
        version=parts["version"],  # type: ignore[arg-type]
        constants={
            "w": _WEIGHT.numpy().tobytes(),
            "s": _SCALES.numpy().tobytes(),
            "b": _BIAS.numpy().tobytes(),
        },
    )


def _pool_graph(**change: object) -> Graph:
    """A 3x3 stride-2 int8 max pool with padding 1 and ceil_mode; `change` replaces named parts."""
    parts: dict[str, object] = {
        "input_dtype": torch.int8,
        "output_dtype": torch.int8,
        "output_shape": [1, 4, 3, 3],
        "kernel": [3, 3],
        "padding": [1, 1],
        "dilation": [1, 1],
        **change,
    }
    values = [
        Value(parts["input_dtype"], _SHAPE, INPUT),  # type: ignore[arg-type]
        Value(parts["output_dtype"], parts["output_shape"], OUTPUT),  # type: ignore[arg-type]
    ]
    args = [
        tensor(0),
        int_list(parts["kernel"]),  # type: ignore[arg-type]
        int_list([2, 2]),
        int_list(parts["padding"]),  # type: ignore[arg-type]
        int_list(parts["dilation"]),  # type: ignore[arg-type]
        bool_(True),
        tensor(1),
    ]
    route = "et_cpu_quant.max_pool2d.default"
    return Graph(
        values=values,
        inputs=[0],
        outputs=[1],
        ops=[Op("et_cpu_quant::max_pool2d.out", args, route=route, provider=1)],
        version=2,
    )


def _add_graph(**change: object) -> Graph:
    """An int8 add of two inputs with a ReLU; `change` replaces named parts."""
    parts: dict[str, object] = {
        "b_dtype": torch.int8,
        "b_shape": _SHAPE,
        "b_scale": 0.02,
        "output_zero_point": _OUT[1],
        **change,
    }
    values = [
        Value(torch.int8, _SHAPE, INPUT),
        Value(parts["b_dtype"], parts["b_shape"], INPUT),  # type: ignore[arg-type]
        Value(torch.int8, _SHAPE, OUTPUT),
    ]
    args = [
        tensor(0),
        float_(_IN[0]),
        int_(_IN[1]),
        tensor(1),
        float_(parts["b_scale"]),  # type: ignore[arg-type]
        int_(-7),
        float_(_OUT[0]),
        int_(parts["output_zero_point"]),  # type: ignore[arg-type]
        int_(-128),
        int_(127),
        float_(0.0),
        float_(math.inf),
        tensor(2),
    ]
    route = "et_cpu_quant.add.default"
    return Graph(
        values=values,
        inputs=[0, 1],
        outputs=[2],
        ops=[Op("et_cpu_quant::add.out", args, route=route, provider=1)],
        version=2,
    )


def _run_add(graph: Graph) -> torch.Tensor:
    x = _input()
    y = torch.flip(x, [3])
    module = load_program(program(lambda a, b: torch.sub(a, b), (x, y), graph))
    return module.forward([x, y])[0]


@pytest.fixture(scope="module", autouse=True)
def _runtime() -> None:
    loader.load_cpu_backend()


def _input() -> torch.Tensor:
    return torch.randint(
        -128, 128, _SHAPE, dtype=torch.int8, generator=torch.Generator().manual_seed(3)
    )


def _run(graph: Graph) -> torch.Tensor:
    x = _input()
    module = load_program(program(lambda a: torch.neg(a), (x,), graph))
    return module.forward([x])[0]


def test_handmade_int8_convolution_matches_its_reference_semantics() -> None:
    got = _run(_conv_graph())
    want = quantized_ops.conv2d(
        _input(),
        _WEIGHT,
        _SCALES,
        _BIAS,
        [1, 1],
        [0, 0],
        [1, 1],
        1,
        *_IN,
        *_OUT,
        -128,
        127,
        0.0,
        math.inf,
    )
    assert got.dtype == torch.int8
    # oneDNN accumulates exactly in int32 and scales in float; the reference rounds float sums:
    # at most one quantization step apart, and here (few terms) equal.
    assert int((got.int() - want.int()).abs().max()) <= 1
    assert int((got == want).sum()) >= 0.99 * want.numel()
    assert int(got.min()) >= _OUT[1]  # the fused ReLU: nothing below the zero point


def test_handmade_int8_max_pool_is_the_pool_of_the_values() -> None:
    x = _input()
    # The program around the payload only needs an output of the pool's dtype and shape.
    module = load_program(program(lambda a: torch.neg(a[:, :, :3, :3]), (x,), _pool_graph()))
    got = module.forward([x])[0]
    want = quantized_ops.max_pool2d(x, [3, 3], [2, 2], [1, 1], [1, 1], True)
    assert torch.equal(got, want)


def test_handmade_int8_add_matches_its_reference_semantics() -> None:
    x = _input()
    got = _run_add(_add_graph())
    want = quantized_ops.add(x, *_IN, torch.flip(x, [3]), 0.02, -7, *_OUT, -128, 127, 0.0, math.inf)
    # The reference multiplies by 1 / scale in double, the runtime in float32 as ExecuTorch does.
    assert int((got.int() - want.int()).abs().max()) <= 1
    assert int(got.min()) >= _OUT[1]


_HOSTILE: dict[str, tuple[Callable[[], Graph], str]] = {
    "add shapes differ": (lambda: _add_graph(b_shape=[1, 4, 5, 4]), "shapes differ"),
    "add dtypes differ": (lambda: _add_graph(b_dtype=torch.uint8), "dtypes differ"),
    "add zero scale": (lambda: _add_graph(b_scale=0.0), "scale is not a positive"),
    "add zero point outside": (lambda: _add_graph(output_zero_point=128), "zero point"),
    "pool output too large": (
        lambda: _pool_graph(output_shape=[1, 4, 4, 3]),
        "output size differs",
    ),
    "pool output channels": (lambda: _pool_graph(output_shape=[1, 3, 3, 3]), "batch / channels"),
    "pool padding over half the kernel": (lambda: _pool_graph(padding=[2, 1]), "padding at most"),
    "pool zero dilation": (lambda: _pool_graph(dilation=[0, 1]), "must be positive"),
    "pool short kernel": (lambda: _pool_graph(kernel=[3]), "2 values"),
    "pool float input": (lambda: _pool_graph(input_dtype=torch.float32), "int8 or uint8"),
    "pool output dtype": (lambda: _pool_graph(output_dtype=torch.uint8), "output dtype"),
    "pool window over the input": (
        lambda: _pool_graph(kernel=[9, 3], padding=[1, 1]),
        "larger than the padded input",
    ),
    "negative input scale": (lambda: _conv_graph(input_scale=-0.5), "scale is not a positive"),
    "nan output scale": (lambda: _conv_graph(output_scale=math.nan), "scale is not a positive"),
    "infinite scale": (lambda: _conv_graph(input_scale=math.inf), "scale is not a positive"),
    "zero point outside int8": (lambda: _conv_graph(output_zero_point=300), "zero point"),
    "uint8 zero point below 0": (
        lambda: _conv_graph(
            input_dtype=torch.uint8,
            output_dtype=torch.uint8,
            input_zero_point=-1,
            quant_min=0,
            quant_max=255,
        ),
        "zero point",
    ),
    "too few channel scales": (lambda: _conv_graph(scales_shape=[3]), "one scale per output"),
    "too many channel scales": (lambda: _conv_graph(scales_shape=[5]), "one scale per output"),
    "float weight": (lambda: _conv_graph(weight_dtype=torch.float32), "constant int8"),
    "float input": (lambda: _conv_graph(input_dtype=torch.float32), "int8 or uint8"),
    "output dtype differs": (lambda: _conv_graph(output_dtype=torch.uint8), "output dtype"),
    "zero groups": (lambda: _conv_graph(groups=0), "groups"),
    "groups not dividing": (lambda: _conv_graph(groups=3), "groups"),
    "zero stride": (lambda: _conv_graph(stride=[0, 1]), "stride"),
    "short stride": (lambda: _conv_graph(stride=[1]), "2 values"),
    "empty quantized range": (lambda: _conv_graph(quant_min=5, quant_max=5), "quant_min"),
    "range outside dtype": (lambda: _conv_graph(quant_max=1000), "quant_min"),
    "nan clamp": (lambda: _conv_graph(output_min=math.nan), "output_min"),
    "inverted clamp": (lambda: _conv_graph(output_min=2.0, output_max=1.0), "output_min"),
    "int8 op in a version 1 payload": (lambda: _conv_graph(version=1), "format version 2"),
}


@pytest.mark.parametrize("case", sorted(_HOSTILE))
def test_damaged_int8_fields_are_init_errors(case: str) -> None:
    build, fragment = _HOSTILE[case]
    graph = build()
    with pytest.raises(RuntimeError):
        _run_add(graph) if len(graph.inputs) == 2 else _run(graph)
    message = loader.last_error()
    assert fragment in message, message


def test_bias_none_is_accepted() -> None:
    graph = _conv_graph()
    graph.ops[0].args[3] = none()
    got = _run(graph)
    assert got.shape == torch.Size(_SHAPE)
