"""The Optimized (oneDNN) provider inside the CPU delegate runtime: every route it takes gives the
results of the Reference provider (ExecuTorch's kernels) within TOLERANCE, on generated
convolution/linear shapes and the lowering tool's example models; it declines what it cannot run
(with the reason in the placement log) and fuses ReLU/clamp/residual adds that follow it.

The same model is lowered twice: once with the route table as is (Optimized routes), once with
every route forced to Reference (the serializer's route lookup patched), and both run in the real
ExecuTorch runtime.
"""

import functools
import re
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import strategies as st

from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import lower_to_pte
from backends.cpu.runtime.test.provider_compare import (
    assert_close_scaled,
    generated_examples,
    placed,
    run_both,
    run_cases,
    run_pte,
    run_pte_both,
)
from tools.lower.examples import get_example


class Conv(torch.nn.Module):
    def __init__(self, conv: torch.nn.Module, act: str) -> None:
        super().__init__()
        self.conv = conv
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if self.act == "relu":
            y = torch.relu(y)
        elif self.act == "hardtanh":
            y = torch.nn.functional.hardtanh(y, -0.5, 0.5)
        return y


@st.composite
def conv_cases(draw: st.DrawFn) -> tuple[torch.nn.Module, torch.Tensor]:
    dims = draw(st.sampled_from([1, 2, 3]))
    groups = draw(st.sampled_from([1, 2, 4]))
    depthwise = draw(st.booleans())
    c_in = 4 if depthwise else groups * draw(st.integers(1, 3))
    c_out = c_in if depthwise else groups * draw(st.integers(1, 3))
    if depthwise:
        groups = c_in
    kernel = draw(st.integers(1, 3))
    stride = draw(st.integers(1, 2))
    dilation = draw(st.integers(1, 2))
    padding = draw(st.integers(0, (kernel - 1) * dilation // 2 + 1))
    size = draw(st.integers(kernel * dilation + 2, 9 if dims == 3 else 14))
    bias = draw(st.booleans())
    act = draw(st.sampled_from(["none", "relu", "hardtanh"]))
    conv_class = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}[dims]
    torch.manual_seed(draw(st.integers(0, 1000)))
    conv = conv_class(c_in, c_out, kernel, stride, padding, dilation, groups, bias)
    x = torch.randn(2, c_in, *([size] * dims))
    return Conv(conv, act).eval(), x


def test_generated_convolutions_match_reference() -> None:
    # The 12 examples Hypothesis draws (derandomized), in two lowerings: ExecuTorch's portable
    # convolution has no 3D case (InvalidArgument), so the 3D ones run apart with eager as the
    # reference; each case's outputs and placement lines are its own.
    examples = [case for (case,) in generated_examples(12, conv_cases())]
    planar = [(model, (x,)) for model, x in examples if x.dim() < 5]
    volumes = [(model, (x,)) for model, x in examples if x.dim() == 5]
    for (model, (x,)), run in zip(planar, run_cases(planar) if planar else [], strict=True):
        with torch.no_grad():
            assert_close_scaled(run.optimized[0], run.reference[0])
            assert_close_scaled(run.optimized[0], model(x))
        assert placed(run.placement, "aten::convolution.out", "Optimized"), run.placement
    for (model, (x,)), run in zip(
        volumes, run_cases(volumes, with_reference=False) if volumes else [], strict=True
    ):
        with torch.no_grad():
            assert_close_scaled(run.optimized[0], model(x))
        assert placed(run.placement, "aten::convolution.out", "Optimized"), run.placement
    assert len(planar) + len(volumes) == 12


class LinearReluResidual(torch.nn.Module):
    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(k, n)
        self.fc2 = torch.nn.Linear(n, n, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        return torch.relu(self.fc2(h) + h)


def test_linear_with_relu_and_residual_is_fused_and_matches_reference() -> None:
    # (rows, k, n) side by side in one program; each case's placement lines are its own.
    cases: list[tuple[torch.nn.Module, tuple[Any, ...]]] = []
    for rows, k, n in [(1, 7, 5), (8, 64, 33), (32, 256, 128)]:
        torch.manual_seed(rows)
        model = LinearReluResidual(k, n).eval()
        cases.append((model, (torch.randn(rows, k),)))
    for run in run_cases(cases):
        assert_close_scaled(run.optimized[0], run.reference[0])
        fused = [line for line in run.placement if "fused into" in line]
        # fc1's relu; fc2's add and relu.
        assert len(fused) == 3, run.placement


def test_matmuls_and_what_the_provider_declines() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.ConvTranspose2d(3, 4, 2, stride=2)

        def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Any:
            return torch.mm(a, b), torch.bmm(c, c.transpose(1, 2)), self.up(c.unsqueeze(0))

    torch.manual_seed(3)
    model = Net().eval()
    inputs = (torch.randn(5, 6), torch.randn(6, 7), torch.randn(3, 4, 4))
    out_opt, out_ref, placement = run_both(model, inputs)
    for got, want in zip(out_opt, out_ref, strict=True):
        assert_close_scaled(got, want)
    assert placed(placement, "aten::mm.out", "Optimized"), placement
    assert placed(placement, "aten::bmm.out", "Optimized"), placement
    # Transposed convolution runs on oneDNN's deconvolution since issue 17 (its declines:
    # deconv_provider_test.py).
    assert placed(placement, "aten::convolution.out", "Optimized"), placement


def test_integer_matmul_falls_back_with_a_reason() -> None:
    class Net(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.mm(a, b)

    inputs = (torch.randint(-9, 9, (3, 4)), torch.randint(-9, 9, (4, 2)))
    out_opt, _, placement = run_both(Net(), inputs)
    assert torch.equal(out_opt[0], inputs[0] @ inputs[1])
    declined = placed(placement, "aten::mm.out", "Reference")
    assert declined and "float32" in declined[0], placement


def _examples() -> Iterator[str]:
    yield from ("resnet", "mobilenet", "mlp_bn")


@functools.cache
def _example_program(name: str) -> tuple[torch.nn.Module, tuple[Any, ...], bytes]:
    """The small example `name`, its sample inputs and its .pte, lowered once for the tests that
    run it under several runtime switches (read when a delegate is initialized)."""
    example = get_example(name)
    model = example.model("small")
    inputs = example.sample_inputs("small")
    return model, inputs, lower_to_pte(model, inputs)[0]


@pytest.mark.parametrize("chain", ["1", "0"])
@pytest.mark.parametrize("name", list(_examples()))
def test_example_models_match_reference(name: str, chain: str) -> None:
    # ET_CPU_ONEDNN_CHAIN=0: every activation plain; default: the convolutions' activations that
    # only other convolutions read stay channels-last.
    _, inputs, pte = _example_program(name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_CHAIN", chain)
        out_opt, out_ref, placement = run_pte_both(pte, inputs)
    for got, want in zip(out_opt, out_ref, strict=True):
        assert_close_scaled(got, want)
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    chained = int(summary.split(", ")[1].split()[0])
    assert (chained > 0) == (chain == "1" and name != "mlp_bn"), summary
    optimized = [line for line in placement if "Optimized" in line and "fused" not in line]
    assert optimized, placement
    assert not [line for line in placement if "declined" in line], placement
    assert placement[-1] != "provider bytes: 0", placement


@pytest.mark.parametrize("name", list(_examples()))
def test_example_models_split_into_pieces_match_reference(name: str) -> None:
    # ET_CPU_ONEDNN_TASK_FLOPS=0: every convolution / linear / matmul that can be split is, as
    # finely as allowed (row bands, channel blocks, column blocks), on 2 work-sharing threads.
    _, inputs, pte = _example_program(name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")
        patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
        out_opt, out_ref, placement = run_pte_both(pte, inputs)
    for got, want in zip(out_opt, out_ref, strict=True):
        assert_close_scaled(got, want)
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    assert "2 threads (work sharing" in summary, summary
    split = int(summary.split("work sharing, ")[1].split()[0])
    # The small MLP's layers are narrower than two 64-column blocks: nothing to split there.
    assert (split > 0) == (name != "mlp_bn"), summary


def _split_conv_twice(
    first: dict[str, str], second: dict[str, str]
) -> tuple[torch.Tensor, torch.Tensor, Any, Any]:
    """A small split convolution net lowered once and loaded twice on 2 threads, each delegate
    initialized with its own switches: (the eager output, the input, the two modules)."""
    from backends.cpu.runtime.test.lowered_program import load

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 8, 3)
    ).eval()
    x = torch.randn(1, 3, 24, 24)
    modules = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ET_CPU_ONEDNN_TASK_FLOPS", "0")
        patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
        pte, _ = lower_to_pte(model, (x,))
        for switches in (first, second):
            for name, value in switches.items():
                patch.setenv(name, value)
            module = load(pte)
            module.forward([x])  # init: the delegate reads its switches here
            modules.append(module)
    (summary,) = [line for line in loader.last_placement() if line.startswith("Optimized(")]
    assert "ops split" in summary and "0 ops split" not in summary, summary
    with torch.no_grad():
        want = model(x)
    return want, x, modules[0], modules[1]


def test_calls_with_the_pool_held_match_calls_without() -> None:
    # A call holds the work pool (ET_CPU_POOL_HOLD, read at init; "all": every call, not only
    # after a call of 1 ms or more): its worker spins between the call's ops instead of sleeping.
    # Two delegates of one program, held and not, alternate on the shared pool; every split op's
    # pieces must still all run, once.
    want, x, held, unheld = _split_conv_twice(
        {"ET_CPU_POOL_HOLD": "all"}, {"ET_CPU_POOL_HOLD": "0"}
    )
    for _ in range(20):
        (a,) = held.forward([x])
        (b,) = unheld.forward([x])
        assert torch.equal(a, b)
        torch.testing.assert_close(a, want, atol=1e-4, rtol=1e-4)


def test_calls_that_wake_a_blocked_pool_match_calls_that_do_not() -> None:
    # A call not held wakes the pool's blocked workers at its start (ET_CPU_POOL_WAKE, on unless
    # 0, read at init): after 60 ms without a job (past the 50 ms nap window) the worker is
    # blocked, the call's wake finds it so, and its split ops must still run every piece once.
    import time

    want, x, waking, not_waking = _split_conv_twice(
        {"ET_CPU_POOL_HOLD": "0"}, {"ET_CPU_POOL_HOLD": "0", "ET_CPU_POOL_WAKE": "0"}
    )
    for _ in range(4):
        time.sleep(0.06)
        (a,) = waking.forward([x])
        time.sleep(0.06)
        (b,) = not_waking.forward([x])
        assert torch.equal(a, b)
        torch.testing.assert_close(a, want, atol=1e-4, rtol=1e-4)


class Pool(torch.nn.Module):
    def __init__(self, kernel: int, stride: int | None, padding: int, ceil: bool) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 4, 1)
        self.args = (kernel, stride, padding, 1, ceil)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # conv -> pool -> conv: the pool reads and writes channels-last between two convolutions.
        y = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), *self.args)
        return self.conv2(y)


def test_max_pool_between_convolutions_matches_reference() -> None:
    # (kernel, stride, padding, ceil, size): ResNet's stem pool; floor mode dropping a row; ceil
    # mode adding a partial window. Side by side in one program.
    cases: list[tuple[torch.nn.Module, tuple[Any, ...]]] = []
    for kernel, stride, padding, ceil, size in [
        (3, 2, 1, False, 14),
        (2, None, 0, False, 13),
        (3, 2, 0, True, 14),
    ]:
        torch.manual_seed(kernel)
        model = Pool(kernel, stride, padding, ceil).eval()
        cases.append((model, (torch.randn(1, 3, size, size),)))
    for run in run_cases(cases):
        assert_close_scaled(run.optimized[0], run.reference[0])
        assert placed(run.placement, "aten::max_pool2d_with_indices.out", "Optimized"), (
            run.placement
        )


class PoolBetweenConvolutions(torch.nn.Module):
    def __init__(self, channels: int, average: bool) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(channels, 4, 1)
        self.average = average

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        if self.average:
            y = torch.nn.functional.avg_pool2d(y, 3, 2, 1, ceil_mode=True, count_include_pad=False)
        else:
            y = torch.nn.functional.max_pool2d(y, 3, 2, 1)
        return self.conv2(y)


@pytest.mark.parametrize(
    "average, size, kernel",
    # ResNet's stem pool (odd rows: bands of unequal height); average in ceil mode (a partial
    # window at the bottom, padding left out of the divisor).
    [(False, 57, "aten::max_pool2d_with_indices.out"), (True, 48, "aten::avg_pool2d.out")],
)
def test_pool_splits_into_row_bands_on_two_threads(average: bool, size: int, kernel: str) -> None:
    # A channels-last pooling worth two cores' time runs in bands of output rows, each with its
    # own top / bottom padding; ET_CPU_POOL_BANDS=0 keeps it whole. Both match float64 eager.
    torch.manual_seed(1)
    model = PoolBetweenConvolutions(64, average).eval()
    inputs = (torch.randn(1, 3, size, size),)
    with torch.no_grad():
        expected = model.double()(inputs[0].double()).float()
    model = model.float()
    pte, _ = lower_to_pte(model, inputs)  # the switches are read when the delegate binds
    split = {}
    for switch in ("1", "0"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
            patch.setenv("ET_CPU_POOL_BANDS", switch)
            (out,) = run_pte(pte, inputs, reference_only=False)
            placement = loader.last_placement()
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
        assert placed(placement, kernel, "Optimized"), placement
        split[switch] = _split_ops(placement)
    assert split["1"] == split["0"] + 1, split


def test_max_pool_whose_indices_are_used_is_declined() -> None:
    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return torch.nn.functional.max_pool2d(x, 2, return_indices=True)

    x = torch.randn(1, 2, 6, 6)
    out_opt, out_ref, placement = run_both(Net(), (x,))
    assert torch.equal(out_opt[0], out_ref[0]) and torch.equal(out_opt[1], out_ref[1])
    declined = placed(placement, "aten::max_pool2d_with_indices.out", "Reference")
    assert declined and "indices are read" in declined[0], placement


_PROFILE_SCRIPT = """
import gc, torch
from backends.cpu.runtime.test.lowered_program import lower
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
x = torch.randn(1, 3, 16, 16)
module, _ = lower(model, (x,))
for _ in range(7):
    module.forward([x])
del module
gc.collect()
"""


def test_profile_table_is_printed_when_the_delegate_is_destroyed() -> None:
    # ET_CPU_PROFILE=1: per-op mean time, share, and placement, on stderr at destroy.
    import os
    import subprocess
    import sys

    env = dict(os.environ, ET_CPU_PROFILE="1", PYTHONPATH=os.pathsep.join(sys.path))
    env["ET_CPU_BACKEND_LIBRARY"] = loader.default_library_path()
    done = subprocess.run(
        [sys.executable, "-c", _PROFILE_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    (header,) = [line for line in lines if line.startswith("CpuBackend profile (ET_CPU_PROFILE)")]
    assert "7 runs" in header, header
    conv = [line for line in lines if "aten::convolution.out: Optimized(oneDNN)" in line]
    assert len(conv) == 1 and conv[0].split()[1] == "us", conv
    assert float(conv[0].split()[0]) > 0.0
    # The ReLU was fused into the convolution: it has no line of its own.
    assert not [line for line in lines if "relu" in line.lower() and " us " in line], lines
    (total_line,) = [line for line in lines if line.endswith("us total")]
    # The delegate's own time per call: its kernels (the table's total) and what lies outside
    # them, split into entry, the gaps between kernels and exit.
    (call_line,) = [line for line in lines if "us per call in the delegate" in line]
    call = re.fullmatch(
        r"\s*([\d.]+) us per call in the delegate \(mean after the first\): kernels ([\d.]+), "
        r"outside them ([\d.]+) \(entry ([\d.]+), between kernels ([\d.]+), exit ([\d.]+)\)",
        call_line,
    )
    assert call is not None, call_line
    whole, kernels, outside, entry, between, exit_ = (float(g) for g in call.groups())
    assert abs(kernels - float(total_line.split()[0])) <= 0.2, (call_line, total_line)
    assert 0.0 < kernels <= whole and abs(whole - kernels - outside) <= 0.2, call_line
    assert abs(entry + between + exit_ - outside) <= 0.4, call_line
    # The first, cold call is totalled apart, not averaged in.
    assert "mean us per run after the first" in header, header
    (first,) = [line for line in lines if line.endswith("the first call (cold), not in the mean")]
    assert float(first.split()[0]) > 0.0, first
    # Where init's compile went, stage by stage (the providers' binds are most of it).
    (compile_line,) = [line for line in lines if line.startswith("compile (init): ")]
    stages = re.fullmatch(
        r"compile \(init\): (\d+) us \(specialize \d+, tensors \d+, bind (\d+), arena \d+, "
        r"finalize \d+\)",
        compile_line,
    )
    assert stages is not None, compile_line
    assert 0 < int(stages[2]) <= int(stages[1]) + 1, compile_line


class Mean(torch.nn.Module):
    def __init__(self, dims: tuple[int, ...], keepdim: bool, after_conv: bool) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1) if after_conv else None
        self.dims = dims
        self.keepdim = keepdim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.conv is not None:
            x = torch.relu(self.conv(x))
        return x.mean(dim=self.dims, keepdim=self.keepdim)


def test_global_average_pooling_runs_on_the_provider() -> None:
    # Global pooling of a channels-last activation, of a plain graph input, negative dims: side
    # by side in one program.
    cases: list[tuple[torch.nn.Module, tuple[Any, ...]]] = []
    for dims, keepdim, after_conv in [
        ((2, 3), True, True),
        ((-1, -2), False, True),
        ((2, 3), False, False),
    ]:
        torch.manual_seed(3)
        model = Mean(dims, keepdim, after_conv).eval()
        cases.append((model, (torch.randn(2, 3, 11, 9),)))
    for run in run_cases(cases):
        assert run.optimized[0].shape == run.reference[0].shape
        assert_close_scaled(run.optimized[0], run.reference[0])
        assert placed(run.placement, "aten::mean.out", "Optimized"), run.placement


def test_mean_over_channels_is_declined() -> None:
    model = Mean((1,), True, False).eval()
    x = torch.randn(1, 4, 5, 5)
    out_opt, out_ref, placement = run_both(model, (x,))
    assert_close_scaled(out_opt[0], out_ref[0])
    declined = placed(placement, "aten::mean.out", "Reference")
    assert declined and "spatial dims" in declined[0], placement


class PointwiseAfterConv(torch.nn.Module):
    """ResNet-50's third stage in small: a 3x3 convolution, then a 1x1 512 -> `c_out` on 14x14."""

    def __init__(self, c_out: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(32, 512, 3, padding=1)
        self.pointwise = torch.nn.Conv2d(512, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(torch.relu(self.conv(x)))


def _split_ops(placement: list[str]) -> int:
    (summary,) = [line for line in placement if line.startswith("Optimized(oneDNN): ")]
    return int(summary.split("work sharing, ")[1].split()[0])


@pytest.mark.parametrize("c_out", [128, 256])
def test_pointwise_convolution_splits_into_row_bands_with_their_own_weight_blocking(
    c_out: int,
) -> None:
    # oneDNN's 1x1 kernel blocks its weights by the shape it sees: bands of 14x14 rows want
    # another blocking than the whole op. Bands that share one reordered copy in their blocking
    # split the op on 2 threads; with ET_CPU_CONV_BAND_WEIGHTS=0 it runs whole.
    torch.manual_seed(0)
    model = PointwiseAfterConv(c_out).eval()
    inputs = (torch.randn(1, 32, 14, 14),)
    with torch.no_grad():
        expected = model(*inputs)
    pte, _ = lower_to_pte(model, inputs)  # the switches are read when the delegate binds
    split = {}
    for switch in ("1", "0"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("ET_CPU_ONEDNN_THREADS", "2")
            patch.setenv("ET_CPU_CONV_BAND_WEIGHTS", switch)
            out_opt, out_ref, placement = run_pte_both(pte, inputs)
        assert_close_scaled(out_opt[0], out_ref[0])
        assert_close_scaled(out_opt[0], expected)
        split[switch] = _split_ops(placement)
    assert split["1"] == split["0"] + 1, split
