"""Issue 46: the mobile networks' stem convolution (3 input channels, 3x3 stride 2, hardswish or
SiLU) runs on our own AVX-512 stem kernel (providers/optimized/kernels/stem_conv.h) inside the
delegate: MobileNetV3- and EfficientNet-style models from tools/bench/zoo.py, batch 1 and 3, a
program with a dynamic batch, the switch unset (the default takes these stems), 1 and 0. The
placement summary counts the stems; every output matches all-Reference and eager.
"""

from typing import Any

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib
from torch.export import Dim

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime import loader
from backends.cpu.runtime.test.lowered_program import assert_single_output_close, lower_to_pte
from backends.cpu.runtime.test.provider_compare import assert_close_scaled, run_pte_both
from tools.bench import zoo

_BUFFERS: list[bytes] = []  # the runtime does not own a program's buffer


def _summary(placement: list[str]) -> str:
    (line,) = [entry for entry in placement if entry.startswith("Optimized(oneDNN): ")]
    return line


def _model(name: str) -> torch.nn.Module:
    model, _ = zoo.create(name, "small", seed=3)
    return model.eval()


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", ["mobilenet_v3", "efficientnet"])
def test_stem_on_our_kernel(name: str, batch: int) -> None:
    """One lowering run with the switch unset (the default), all and 0 (read at init)."""
    model = _model(name)
    x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(batch))
    pte, _ = lower_to_pte(model, (x,))
    for own in ["unset", "all", "0"]:
        with pytest.MonkeyPatch.context() as patch:
            if own == "unset":
                patch.delenv("ET_CPU_OWN_STEM", raising=False)
            else:
                patch.setenv("ET_CPU_OWN_STEM", own)
            out_opt, out_ref, placement = run_pte_both(pte, (x,))
        expected = 0 if own == "0" else 1
        assert f", {expected} stem, " in _summary(placement), (own, placement)
        with torch.no_grad():
            assert_close_scaled(out_opt[0], out_ref[0])
            assert_close_scaled(out_opt[0], model(x))


@pytest.mark.parametrize("name", ["mobilenet_v3", "efficientnet"])
def test_stem_with_a_dynamic_batch(name: str) -> None:
    """One program exported with batch in [1, 4]: the stem's shape plans (batch 1, 3 and the
    bound) run on our kernel and match eager."""
    model = _model(name)
    loader.load_cpu_backend()
    partitioner = CpuPartitioner()
    example = torch.randn(2, 3, 32, 32)
    exported = torch.export.export(
        model, (example,), dynamic_shapes=({0: Dim("batch", min=1, max=4)},)
    )
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    assert partitioner.report.left_out == (), partitioner.report
    pte = bytes(edge.to_executorch().buffer)
    _BUFFERS.append(pte)
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ET_CPU_OWN_STEM", raising=False)
        module: Any = portable_lib._load_for_executorch_from_buffer(pte)
        for batch in [1, 3, 4]:
            x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(batch))
            assert_single_output_close(module, model, x, atol=1e-4, rtol=1e-4)
            assert ", 1 stem, " in _summary(loader.last_placement()), loader.last_placement()
