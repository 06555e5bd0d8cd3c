"""What the tests of our own convolution kernels share (depthwise_conv_test for
kernels/depthwise_conv.h, stem_conv_test for kernels/stem_conv.h): the providers they run on,
torch's float64 reference, and one run of a convolution plan through the C ABI that checks which
kernel the plan chose.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F

from backends.cpu.runtime.providers.optimized.test.onednn_ctypes import SILU, Plan, PostOp, Provider

Reference = Callable[[torch.Tensor], torch.Tensor]


def vector_provider(family: str) -> Provider:
    """A 2-thread provider; skips the test on a CPU without AVX-512F, where `family`
    convolutions stay on oneDNN."""
    provider = Provider(num_threads=2)
    if not provider.has_vector_activation(SILU):
        pytest.skip(f"no AVX-512F on this CPU: {family} convolutions stay on oneDNN")
    return provider


def splitting_provider() -> Provider:
    """A provider that splits every op it can (min_task_flops=0): rows share out on the pool."""
    return Provider(num_threads=2, min_task_flops=0)


def conv_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int,
    padding: int,
    activation: Reference,
    depthwise: bool = False,
) -> torch.Tensor:
    """F.conv2d (groups = channels when `depthwise`) and the activation in float64, as float32."""
    y = F.conv2d(
        x.double(),
        weight.double(),
        None if bias is None else bias.double(),
        stride=stride,
        padding=padding,
        groups=x.shape[1] if depthwise else 1,
    )
    return activation(y).float()


def run_conv(
    provider: Provider,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int,
    padding: int,
    post_ops: Sequence[PostOp],
    input_channels_last: bool = True,
    *,
    family: str,
    depthwise: bool = False,
    own: bool = True,
    output: str = "channels_last",
    dilation: int = 1,
    residual: torch.Tensor | None = None,
    plans: list[Plan] | None = None,
) -> torch.Tensor:
    """Prepares and runs the convolution (groups = channels when `depthwise`) with the input in
    the layout asked for (and `residual`, in the output's layout, for an add post-op); asserts
    that our `family` kernel took it exactly when `own`, the output shape, and a channels-last
    output from our kernel when one was asked for. The plan is appended to `plans` if given."""
    plan = provider.conv(
        list(x.shape),
        weight,
        bias,
        [stride, stride],
        [padding, padding],
        [dilation, dilation],
        groups=x.shape[1] if depthwise else 1,
        post_ops=post_ops,
        input_channels_last=input_channels_last,
        output=output,
    )
    assert plan.describe().startswith(f"{family}:avx512") == own, plan.describe()
    if plans is not None:
        plans.append(plan)
    layout = torch.channels_last if input_channels_last else torch.contiguous_format
    if residual is not None and output == "channels_last":
        residual = residual.contiguous(memory_format=torch.channels_last)
    out = plan.run(x.contiguous(memory_format=layout), residual=residual)
    assert out.shape == plan.output_shape
    if own and output == "channels_last":
        assert plan.output_is_channels_last
    return out


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """1e-5 relative and absolute: the kernels sum at most a few hundred float32 products and the
    vector sigmoid is within 4e-6 relative."""
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
