"""Runs inside the fresh virtualenv of wheel_install_test with the installed et_cpu_plugin only:
lowers a small CNN and an integer model with CpuPartitioner, runs both on the ExecuTorch runtime
with the installed runtime library and prints one JSON line per model comparing them with eager.

It imports nothing of the repository (the test runs it with no path of the checkout), so it
defines its own models.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime
from torch import nn

# The installed package, which only the fresh virtualenv has (not the type checker's environment).
et_cpu_plugin = importlib.import_module("et_cpu_plugin")
CpuPartitioner = et_cpu_plugin.CpuPartitioner
load_cpu_backend = et_cpu_plugin.load_cpu_backend


class SmallCnn(nn.Module):
    """Conv-BN-ReLU, a depthwise conv, max pooling, global average pooling and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(8, 5)
        mean, var = self.bn.running_mean, self.bn.running_var
        assert mean is not None and var is not None
        with torch.no_grad():  # non-trivial statistics: a wrongly folded BN changes the output
            mean.uniform_(-0.5, 0.5)
            var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        y = self.pool(torch.clamp(self.depthwise(y), 0.0, 6.0))
        return self.head(y.mean(dim=(2, 3)))


class IntegerModel(nn.Module):
    """int64 gather, a bool mask, an integer reduction, argmax, int32 arithmetic and `where`."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(
        self, table: torch.Tensor, rows: torch.Tensor, codes: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        picked = table[rows]
        mask = picked > 0
        best = torch.argmax(self.proj(picked), dim=1)
        shifted = (codes * 3 + best).to(torch.int32)
        return mask.sum(dim=1), torch.where(shifted > 4, shifted, -shifted), mask


def check(name: str, model: nn.Module, inputs: tuple[torch.Tensor, ...], out_dir: Path) -> dict:
    model = model.eval()
    partitioner = CpuPartitioner()
    exported = torch.export.export(model, inputs)
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    graph = edge.exported_program().graph_module.graph
    outside = sorted(
        {
            str(node.target)
            for node in graph.nodes
            if node.op == "call_function"
            and "executorch_call_delegate" not in str(node.target)
            and "getitem" not in str(node.target)
        }
    )
    pte = out_dir / f"{name}.pte"
    with pte.open("wb") as f:
        edge.to_executorch().write_to_file(f)
    forward = Runtime.get().load_program(pte).load_method("forward")
    assert forward is not None
    actual = list(forward.execute(inputs))
    expected = model(*inputs)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    outputs = []
    for got, want in zip(actual, expected, strict=True):
        same_kind = got.dtype == want.dtype and got.shape == want.shape
        if want.is_floating_point():
            close = same_kind and torch.allclose(got, want, rtol=1e-4, atol=1e-4)
            diff = float((got - want).abs().max()) if same_kind else None
        else:
            close = same_kind and torch.equal(got, want)
            diff = 0.0 if close else None
        outputs.append({"dtype": str(want.dtype), "matches_eager": close, "max_abs_diff": diff})
    return {
        "model": name,
        "left_out": [str(n) for n in partitioner.report.left_out],
        "ops_outside_delegate": outside,
        "outputs": outputs,
    }


def main() -> int:
    out_dir = Path(sys.argv[1])
    library = load_cpu_backend()
    print(json.dumps({"library": library, "package": et_cpu_plugin.__file__}))
    torch.manual_seed(0)
    cnn_inputs = (torch.randn(1, 3, 16, 16),)
    table = torch.randn(8, 6)
    integer_inputs = (table, torch.tensor([5, 0, 3, 7]), torch.tensor([-4, 9, 0, 2]))
    for name, model, inputs in (
        ("small_cnn", SmallCnn(), cnn_inputs),
        ("integer_model", IntegerModel(), integer_inputs),
    ):
        print(json.dumps(check(name, model, inputs, out_dir)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
