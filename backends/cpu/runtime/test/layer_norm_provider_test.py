"""native_layer_norm on the Optimized provider (oneDNN's layer normalization, issue 19): over the
last dim and over several trailing dims, with and without weight and bias, and torch's per-row
mean and 1 / std outputs, compared with all-Reference and eager within provider_compare's
tolerance."""

import torch

from backends.cpu.runtime.test.provider_compare import assert_close_scaled, placed, run_both


class Norms(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.last = torch.nn.LayerNorm(24)
        self.two = torch.nn.LayerNorm([5, 24], eps=1e-3)
        self.plain = torch.nn.LayerNorm(24, elementwise_affine=False)
        self.no_bias = torch.nn.LayerNorm(24, bias=False)
        with torch.no_grad():
            for norm in (self.last, self.two, self.no_bias):
                norm.weight.normal_(1.0, 0.3)
                if norm.bias is not None:
                    norm.bias.normal_(0.0, 0.3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = x * 2.0  # an activation, as in a model
        out, mean, rstd = torch.ops.aten.native_layer_norm(
            h, [24], self.last.weight, self.last.bias, 1e-5
        )
        return out, mean + 0.0, rstd + 0.0, self.two(h), self.plain(h), self.no_bias(h)


def test_layer_norms_run_on_the_provider() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 24) * 3.0 + 0.5
    model = Norms().eval()
    out_opt, out_ref, placement = run_both(model, (x,))
    with torch.no_grad():
        expected = model(x)
    assert len(out_opt) == len(expected) == 6
    for got, ref, want in zip(out_opt, out_ref, expected, strict=True):
        assert got.shape == want.shape
        assert_close_scaled(got, ref)
        assert_close_scaled(got, want)
    lines = placed(placement, "aten::native_layer_norm.out", "Optimized")
    assert len(lines) == 4, placement
