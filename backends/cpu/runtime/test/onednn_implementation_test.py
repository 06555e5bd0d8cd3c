"""Which oneDNN implementation runs each primitive: none of these layout combinations may fall to
oneDNN's reference kernels (`ref:`), which are correct but tens of times slower.

A pooling between a convolution (channels-last output) and a flatten (read plain by the
Reference provider's view_copy) once ran as `pooling,ref:any` (src acdb, dst abcd): 4.9 ms
instead of 0.03 ms at 8x64x16x16, 86% of a small CNN. The target sets ONEDNN_VERBOSE=1, so
oneDNN prints one `onednn_verbose,exec,...` line per primitive it runs on this process's stdout.
"""

from collections.abc import Callable

import pytest
import torch

from backends.cpu.runtime.test.provider_compare import assert_close_scaled, placed, run_both

F = torch.nn.functional


class PoolThenFlatten(torch.nn.Module):
    """conv (channels-last activations) -> pool -> flatten (a plain read) -> linear."""

    def __init__(self, pool: Callable[[torch.Tensor], torch.Tensor], spatial: int) -> None:
        super().__init__()
        self.pool = pool
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * spatial * spatial, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(torch.relu(self.conv(x)))
        return self.fc(y.flatten(1))


def _executed(out: str, primitive: str) -> list[str]:
    """(implementation, layouts) of each `primitive` oneDNN executed, from its verbose lines."""
    fields = [line.split(",") for line in out.splitlines() if line.startswith("onednn_verbose,")]
    return [
        f"{f[4]} ({f[6]})" for f in fields if len(f) > 6 and f[1] == "exec" and f[3] == primitive
    ]


def _check_jit(
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    kernel: str,
    primitive: str,
    what: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Lowers and runs `model`: `kernel` placed on Optimized, the output matches eager, and every
    `primitive` oneDNN ran was a jit one (none `ref:`)."""
    capfd.readouterr()
    out_opt, _, placement = run_both(model, inputs, with_reference=False)
    verbose = capfd.readouterr().out
    assert placed(placement, kernel, "Optimized(oneDNN)"), placement
    with torch.no_grad():
        assert_close_scaled(out_opt[0], model(*inputs))
    ran = _executed(verbose, primitive)
    assert ran, f"{what}: no oneDNN {primitive} ran (is ONEDNN_VERBOSE=1 set?)"
    slow = [line for line in ran if line.startswith("ref:")]
    assert not slow, f"{what} ran oneDNN's reference kernel: {slow}"


@pytest.mark.parametrize(
    "name,pool,kernel",
    [
        ("max", lambda x: F.max_pool2d(x, 2), "aten::max_pool2d_with_indices.out"),
        ("avg", lambda x: F.avg_pool2d(x, 2), "aten::avg_pool2d.out"),
    ],
)
def test_pooling_before_a_flatten_runs_a_jit_kernel(
    name: str,
    pool: Callable[[torch.Tensor], torch.Tensor],
    kernel: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    model = PoolThenFlatten(pool, 8).eval()
    inputs = (torch.randn(4, 3, 16, 16),)
    _check_jit(model, inputs, kernel, "pooling", f"{name} pooling", capfd)


class LogSoftmaxAfterConv1d(torch.nn.Module):
    """conv1d (channels-last activations) -> log_softmax over time (dim 2: a speech model's
    frame scores) or over the channels (dim 1: per-position class scores)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.conv = torch.nn.Conv1d(8, 24, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(torch.relu(self.conv(x)), dim=self.dim)


@pytest.mark.parametrize("dim", [1, 2])
def test_softmax_after_a_convolution_runs_a_jit_kernel(
    dim: int, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # oneDNN's softmax (its layout choice is what this checks): our AVX-512 kernel runs none.
    monkeypatch.setenv("ET_CPU_VECTOR_SOFTMAX", "0")
    model = LogSoftmaxAfterConv1d(dim).eval()
    inputs = (torch.randn(2, 8, 40),)
    _check_jit(
        model, inputs, "aten::_log_softmax.out", "softmax", f"log_softmax over dim {dim}", capfd
    )


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_upsampling_into_the_graph_output_runs_a_jit_kernel(
    mode: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A segmentation head's last upsampling: a channels-last conv output into the graph's plain
    output."""

    class UpsampleHead(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.interpolate(torch.relu(self.conv(x)), scale_factor=2, mode=mode)

    model = UpsampleHead().eval()
    inputs = (torch.randn(2, 3, 12, 12),)
    kernel = f"aten::upsample_{mode}2d.vec_out"
    _check_jit(model, inputs, kernel, "resampling", f"{mode} upsampling", capfd)


class CatOfLayouts(torch.nn.Module):
    """A channels-last conv output concatenated with a plain graph input (then a conv along
    channels, else a plain read), or ViT's class token [1, 1, C] before the patches."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.post = torch.nn.Conv2d(11, 4, 1)
        self.token = torch.nn.Parameter(torch.randn(1, 1, 8))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = torch.relu(self.conv(x))
        if self.dim == 0:  # the class token: patches (1, 8, H*W) -> (1, H*W, 8)
            return torch.cat([self.token, z.flatten(2).transpose(1, 2)], dim=1) * 2.0
        z = torch.cat([z, y], dim=self.dim)
        return self.post(z) if self.dim == 1 else z * 2.0


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
def test_concatenation_of_mixed_layouts_runs_no_reference_kernel(
    dim: int, capfd: pytest.CaptureFixture[str]
) -> None:
    model = CatOfLayouts(dim).eval()
    y_shape = {0: (1, 3, 6, 7), 1: (1, 3, 6, 7), 2: (1, 8, 4, 7), 3: (1, 8, 6, 5)}[dim]
    inputs = (torch.randn(1, 3, 6, 7), torch.randn(*y_shape))
    capfd.readouterr()
    out_opt, _, placement = run_both(model, inputs, with_reference=False)
    verbose = capfd.readouterr().out
    assert placed(placement, "aten::cat.out", "Optimized(oneDNN)"), placement
    with torch.no_grad():
        assert_close_scaled(out_opt[0], model(*inputs))
    ran = _executed(verbose, "concat") + _executed(verbose, "reorder")
    slow = [line for line in ran if line.startswith("ref:")]
    assert not slow, f"concatenation along dim {dim} ran oneDNN's reference kernel: {slow}"


class HeadsAttention(torch.nn.Module):
    """q @ k^T and softmax @ v on heads split from [1, tokens, heads * dim] activations: the
    runtime folds the head splits and k's transpose into the products' operand strides."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        def heads(t: torch.Tensor) -> torch.Tensor:
            return (t + 1.0).view(1, t.shape[1], 3, 16).transpose(1, 2)

        scores = heads(q) @ heads(k).transpose(-2, -1)
        return torch.softmax(scores, dim=-1) @ heads(v)


@pytest.mark.parametrize("queries", [1, 24])
def test_products_reading_permuted_operands_run_no_reference_kernel(
    queries: int, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # oneDNN's matmuls on strided operands: one-row products otherwise run on our row_bmm
    # kernel (row_bmm_test covers that path).
    monkeypatch.setenv("ET_CPU_ROW_BMM", "0")
    model = HeadsAttention().eval()
    inputs = (torch.randn(1, queries, 48), torch.randn(1, 24, 48), torch.randn(1, 24, 48))
    capfd.readouterr()
    out_opt, _, placement = run_both(model, inputs, with_reference=False)
    verbose = capfd.readouterr().out
    with torch.no_grad():
        assert_close_scaled(out_opt[0], model(*inputs))
    folded = [line for line in placement if "aten::permute_copy.out: folded into" in line]
    # q, k (twice: the head split composed into the transpose), v; a one-token q's split may
    # export as a view
    assert len(folded) >= 3, placement
    ran = _executed(verbose, "matmul")
    print("matmuls:", ran)
    assert ran and not [line for line in ran if line.startswith("ref:")], ran
