"""The elementwise math of normalizations, rotary embeddings and scalar arithmetic (issue 19) on
the Optimized provider: pow by a scalar, rsqrt, sqrt, exp, log, abs, neg and add/sub/rsub/mul/div
by a scalar, each as one oneDNN eltwise (x * x, sqrt, x ** p, alpha * x + beta, ...).

Each case lowers the model twice (route table as is; every route forced to Reference) and
compares both with each other and with eager within provider_compare's tolerance (1e-4 relative
to the output's scale; oneDNN's exp/log/pow approximations differ from libm's by a few ulps).
NaNs (log and sqrt of negative inputs) must appear in the same places.
"""

from collections.abc import Callable

import pytest
import torch

from backends.cpu.runtime.test.provider_compare import ATOL, RTOL, placed, run_both

Op = Callable[[torch.Tensor], torch.Tensor]

# name -> (op, the kernel its route names when Edge keeps the op's own form)
OPS: dict[str, tuple[Op, str]] = {
    "square": (lambda x: x.pow(2), "aten::pow.Tensor_Scalar_out"),
    "pow_half": (lambda x: x.pow(0.5), "aten::pow.Tensor_Scalar_out"),
    "pow_fraction": (lambda x: x.abs().pow(1.7), "aten::pow.Tensor_Scalar_out"),
    "rsqrt": (torch.rsqrt, "aten::rsqrt.out"),
    "sqrt": (torch.sqrt, "aten::sqrt.out"),
    "exp": (torch.exp, "aten::exp.out"),
    "log": (torch.log, "aten::log.out"),
    "abs": (torch.abs, "aten::abs.out"),
    "neg": (torch.neg, "aten::neg.out"),
    "add_scalar": (lambda x: x + 0.75, "aten::add.Scalar_out"),
    "sub_scalar": (lambda x: x - 1.5, "aten::sub.Scalar_out"),
    "rsub_scalar": (lambda x: 2.0 - x, "aten::rsub.Scalar_out"),
    "mul_scalar": (lambda x: x * -0.125, "aten::mul.Scalar_out"),
    "div_scalar": (lambda x: x / 3.0, "aten::div.Scalar_out"),
}


class Each(torch.nn.Module):
    """Every op of `names` on the graph input (one lowering for all keeps the test fast)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.ops = [OPS[name][0] for name in names]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(op(x) for op in self.ops)


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    finite = expected[torch.isfinite(expected)]
    scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
    torch.testing.assert_close(actual, expected, atol=ATOL * scale, rtol=RTOL, equal_nan=True)


def _run(names: list[str], x: torch.Tensor) -> list[str]:
    model = Each(names).eval()
    out_opt, out_ref, placement = run_both(model, (x,))
    with torch.no_grad():
        expected = model(x)
    for name, got, ref, want in zip(names, out_opt, out_ref, expected, strict=True):
        assert got.shape == want.shape, name
        _close(got, ref)
        _close(got, want)
    return placement


@pytest.mark.parametrize("shape", [[7], [2, 12, 33], [1, 16, 56, 57]])
def test_elementwise_math_runs_on_the_provider(shape: list[int]) -> None:
    torch.manual_seed(shape[-1])
    # Mostly positive (the roots and log), some negatives and zeros (NaN and inf where torch has
    # them); exp's inputs stay where float32 does not overflow.
    x = torch.randn(*shape) * 3.0 + 1.0
    x.view(-1)[::11] = 0.0
    names = sorted(OPS)
    placement = _run(names, x)
    for name in names:
        if "scalar" not in name:
            assert placed(placement, OPS[name][1], "Optimized"), (name, placement)
    # to_edge turns most python-scalar arithmetic into the Tensor forms with a constant operand
    # (oneDNN's binary); what stays a .Scalar op (SDPA's scale) takes the eltwise: none of
    # them may run on Reference.
    assert not [line for line in placement if "Reference" in line], placement


def test_integer_exponent_stays_on_the_reference_kernel() -> None:
    # oneDNN's pow is exp(p * log(x)): wrong for negative x, where x ** 3 is real; torch's
    # kernel runs it (the route's provider declines with the reason).
    x = torch.linspace(-3.0, 3.0, 40).reshape(4, 10)
    model = Each(["square"]).eval()
    model.ops = [lambda t: t.pow(3)]
    out_opt, _, placement = run_both(model, (x,))
    torch.testing.assert_close(out_opt[0], x.pow(3))
    lines = placed(placement, "aten::pow.Tensor_Scalar_out", "Reference (declined")
    assert lines and "non-integer" in lines[0], placement


class ScaledScores(torch.nn.Module):
    """What keeps the .Scalar forms in Edge: scaled_dot_product_attention scales q and k by
    sqrt(scale) with mul.Scalar."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.3)


def test_scalar_multiply_of_attention_runs_on_the_provider() -> None:
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
    out_opt, out_ref, placement = run_both(ScaledScores().eval(), (q, k, v))
    expected = ScaledScores()(q, k, v)
    _close(out_opt[0], out_ref[0])
    _close(out_opt[0], expected)
    assert placed(placement, "aten::mul.Scalar_out", "Optimized"), placement
