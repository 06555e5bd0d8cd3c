"""Per-route checks: one tiny model per op family, lowered whole, run on the runtime, vs eager.
The selected cases are lowered side by side as one program (one lowering, not one per case);
each case is checked on its own outputs and the routes of its own ops.

Each case asserts the op really reached the delegate (its route is in the payload), so a
regression in how the writer encodes that op's arguments fails here by name. Floats compare
with rtol=1e-5, atol=1e-5; integer and bool outputs exactly.
"""

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

from backends.cpu.runtime.loader import load_cpu_backend
from backends.cpu.runtime.test.lowered_program import load, lower_cases
from backends.cpu.serialization.graph_reader import read_payload
from backends.cpu.test.models import randomize_batch_norm

_GEN = torch.Generator().manual_seed(0)


def _f(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_GEN)


def _i(*shape: int, low: int = -5, high: int = 6) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=_GEN)


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., object]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> object:
        return self.fn(*args)


# (case id, module, inputs, a route that must be in the payload)
_CASES: list[tuple[str, torch.nn.Module, tuple[torch.Tensor, ...], str]] = [
    (
        "conv2d_strided_grouped",
        _Fn(lambda x, w: F.conv2d(x, w, None, stride=2, padding=1, dilation=1, groups=2)),
        (_f(1, 4, 7, 7), _f(6, 2, 3, 3)),
        "aten.convolution.default",
    ),
    (
        "conv1d",
        _Fn(lambda x, w: F.conv1d(x, w, padding=2)),
        (_f(2, 3, 9), _f(4, 3, 5)),
        "aten.convolution.default",
    ),
    (
        "linear_3d_no_bias",
        _Fn(lambda x, w: F.linear(x, w)),
        (_f(2, 3, 5), _f(4, 5)),
        "aten.linear.default",
    ),
    (
        "addmm",
        _Fn(lambda b, x, y: torch.addmm(b, x, y, beta=0.5, alpha=2.0)),
        (_f(4), _f(3, 5), _f(5, 4)),
        "aten.addmm.default",
    ),
    ("mm", _Fn(torch.mm), (_f(3, 5), _f(5, 2)), "aten.mm.default"),
    ("bmm", _Fn(torch.bmm), (_f(2, 3, 5), _f(2, 5, 2)), "aten.bmm.default"),
    ("add_alpha", _Fn(lambda x, y: torch.add(x, y, alpha=3)), (_i(3, 4), _i(4)), "aten.add.Tensor"),
    ("sub_rsub", _Fn(lambda x: (x - 2.5, 1.5 - x)), (_f(3, 4),), "aten.sub.Tensor"),
    (
        "div_modes",
        _Fn(
            lambda x, y: (
                x / y,
                torch.div(x, y, rounding_mode="floor"),
                torch.div(x, y, rounding_mode="trunc"),
            )
        ),
        (_f(5), _f(5) + 3.0),
        "aten.div.Tensor_mode",
    ),
    (
        "int_remainder_floordiv",
        _Fn(lambda x, y: (torch.remainder(x, y), torch.floor_divide(x, y))),
        (_i(6, low=0, high=20), _i(6, low=1, high=5)),
        "aten.remainder.Tensor",
    ),
    ("neg_abs_int", _Fn(lambda x: torch.abs(-x)), (_i(5),), "aten.abs.default"),
    (
        "clamp_hardtanh",
        _Fn(
            lambda x: (
                torch.clamp(x, min=-0.5),
                torch.clamp(x, -0.2, 0.3),
                F.hardtanh(x, -0.1, 0.1),
            )
        ),
        (_f(8),),
        "aten.hardtanh.default",
    ),
    (
        "clamp_tensor",
        _Fn(lambda x, lo, hi: torch.clamp(x, lo, hi)),
        (_f(6), _f(6) - 1.0, _f(6) + 1.0),
        "aten.clamp.Tensor",
    ),
    (
        "sigmoid_tanh_relu",
        _Fn(lambda x: torch.relu(torch.tanh(x)) + torch.sigmoid(x)),
        (_f(2, 3),),
        "aten.sigmoid.default",
    ),
    (
        "max_pool_padded",
        _Fn(lambda x: F.max_pool2d(x, 3, stride=2, padding=1)),
        (_f(1, 2, 7, 7),),
        "aten.max_pool2d_with_indices.default",
    ),
    (
        "avg_pool_no_pad_count",
        _Fn(lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)),
        (_f(1, 2, 7, 7),),
        "aten.avg_pool2d.default",
    ),
    (
        "adaptive_avg_pool",
        _Fn(lambda x: F.adaptive_avg_pool2d(x, (2, 3))),
        (_f(1, 2, 6, 6),),
        "aten._adaptive_avg_pool2d.default",
    ),
    (
        "reductions",
        _Fn(
            lambda x: (
                x.mean(dim=1, keepdim=True),
                x.sum(dim=(0, 2)),
                x.amax(dim=-1),
                x.argmax(dim=1),
            )
        ),
        (_f(2, 3, 4),),
        "aten.amax.default",
    ),
    ("cumsum_int", _Fn(lambda x: torch.cumsum(x, dim=1)), (_i(3, 4),), "aten.cumsum.default"),
    (
        "shapes",
        _Fn(
            lambda x: (
                torch.cat(
                    [
                        x.permute(1, 0).reshape(2, 6),
                        x.view(2, 6)[:, 1:7:2].expand(2, 3).repeat_interleave(2, dim=1),
                    ],
                    dim=0,
                )[:, 2]
                .unsqueeze(0)
                .squeeze(0)
            )
        ),
        (_f(4, 3),),
        "aten.slice_copy.Tensor",
    ),
    (
        "select_expand",
        _Fn(lambda x: x.select(1, 2).unsqueeze(1).expand(3, 4) + x.clone()),
        (_f(3, 4),),
        "aten.expand_copy.default",
    ),
    (
        "index_with_none",
        _Fn(lambda x, idx: x[:, idx]),
        (_f(3, 5), torch.tensor([4, 0, 2])),
        "aten.index.Tensor",
    ),
    (
        "index_put_accumulate",
        _Fn(lambda x, idx, v: torch.index_put(x, (idx,), v, accumulate=True)),
        (_i(6), torch.tensor([1, 3, 1]), _i(3)),
        "aten.index_put.default",
    ),
    (
        "gather_where",
        _Fn(lambda x, idx: torch.where(x > 0, torch.gather(x, 1, idx), -1.0)),
        (_f(3, 4), torch.tensor([[0], [3], [1]])),
        "aten.gather.default",
    ),
    (
        "bool_logic",
        _Fn(
            lambda x, y: (
                torch.logical_and(x > 0, y < 0),
                torch.logical_or(x == y, ~(x != 1)),
                torch.logical_not(x >= y),
                (x <= 2) ^ (y > 1),
            )
        ),
        (_i(7), _i(7)),
        "aten.logical_not.default",
    ),
    (
        "bitwise_int",
        _Fn(lambda x, y: (x & y, x | y, x ^ y, ~x, x & 5, x | 8, x ^ 3)),
        (_i(6, low=0, high=16), _i(6, low=0, high=16)),
        "aten.bitwise_not.default",
    ),
    (
        "factories",
        _Fn(
            lambda x: (
                torch.arange(2, 11, 3) + x,
                torch.full((2, 3), 7, dtype=torch.int32),
                torch.full_like(x, 2.5),
                torch.arange(4),
            )
        ),
        (_f(3),),
        "aten.arange.start_step",
    ),
    (
        "softmax_log_softmax",
        _Fn(lambda x: (F.softmax(x, dim=1), F.log_softmax(x * 20.0, dim=-1))),
        (_f(2, 3, 5),),
        "aten._log_softmax.default",
    ),
    (
        "constant_pad",
        _Fn(lambda x, n: (F.pad(x, (1, 2, 0, 3), value=0.5), F.pad(n, (2, 1), value=7))),
        (_f(1, 2, 3, 4), _i(3, 4)),
        "aten.constant_pad_nd.default",
    ),
    # The .vec overloads take `SymInt[]? output_size` and `float[]? scale_factors`, one is None.
    (
        "upsample_nearest_scale_and_size",
        _Fn(
            lambda x: (
                F.interpolate(x, scale_factor=(1.5, 2.0), mode="nearest"),
                F.interpolate(x, size=(3, 11), mode="nearest"),
            )
        ),
        (_f(1, 2, 5, 4),),
        "aten.upsample_nearest2d.vec",
    ),
    (
        "upsample_bilinear_scale_size_corners",
        _Fn(
            lambda x: (
                F.interpolate(x, scale_factor=1.7, mode="bilinear"),
                F.interpolate(x, size=(3, 9), mode="bilinear", align_corners=True),
                F.interpolate(x, scale_factor=0.6, mode="bilinear"),
            )
        ),
        (_f(2, 3, 5, 6),),
        "aten.upsample_bilinear2d.vec",
    ),
    (
        "unfused_batch_norm",
        randomize_batch_norm(torch.nn.Sequential(torch.nn.BatchNorm2d(3))),
        (_f(2, 3, 4, 4),),
        "aten._native_batch_norm_legit_no_training.default",
    ),
]


@pytest.fixture(scope="module", autouse=True)
def _runtime() -> Iterator[None]:
    load_cpu_backend()
    yield


_TEST = "test_op_runs_in_the_delegate_like_eager"


@pytest.fixture(scope="module")
def _lowered(request: pytest.FixtureRequest) -> dict[str, tuple[list[torch.Tensor], list[str]]]:
    """Every selected case lowered in one program and run once: per case id, its outputs and the
    routes of its ops in the payload."""
    selected = {
        item.callspec.id
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.originalname == _TEST
    }
    chosen = [(name, module, inputs) for name, module, inputs, _ in _CASES if name in selected]
    lowered = lower_cases([(module, inputs) for _, module, inputs in chosen])
    actual = list(load(lowered.pte).forward(lowered.inputs))
    results: dict[str, tuple[list[torch.Tensor], list[str]]] = {
        name: ([], []) for name, _, _ in chosen
    }
    for case, got in zip(lowered.output_cases, actual, strict=True):
        results[chosen[case][0]][0].append(got)
    for op in read_payload(lowered.payload).ops:
        results[chosen[lowered.op_cases[op.name]][0]][1].append(op.route)
    return results


@pytest.mark.parametrize(("name", "module", "inputs", "route"), _CASES, ids=[c[0] for c in _CASES])
def test_op_runs_in_the_delegate_like_eager(
    _lowered: dict[str, tuple[list[torch.Tensor], list[str]]],
    name: str,
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    route: str,
) -> None:
    actual, routes = _lowered[name]
    assert route in routes, routes
    with torch.no_grad():
        expected = module(*inputs)
    expected_list = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(actual) == len(expected_list)
    for got, want in zip(actual, expected_list, strict=True):
        if want.dtype.is_floating_point:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        else:
            assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
