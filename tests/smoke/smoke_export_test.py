"""Smoke test: the pinned toolchain runs a full torch.export -> ExecuTorch round trip."""

import os
import sys

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib


class _AddMul(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x + y) * 2.0


def test_interpreter_is_the_pinned_virtualenv() -> None:
    # Nothing may come from the system site-packages: torch must live inside the venv.
    assert sys.prefix != sys.base_prefix, "not running inside a virtualenv"
    assert os.path.realpath(torch.__file__).startswith(os.path.realpath(sys.prefix))
    assert torch.__version__.startswith("2.13.0")


def test_export_lower_run_round_trip() -> None:
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    program = torch.export.export(_AddMul(), (x, y))
    pte = to_edge_transform_and_lower(program).to_executorch().buffer
    module = portable_lib._load_for_executorch_from_buffer(pte)
    (out,) = module.forward((x, y))
    torch.testing.assert_close(out, (x + y) * 2.0, rtol=0, atol=0)
    del module
    del pte
