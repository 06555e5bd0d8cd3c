"""op_cost on a really lowered program: every FLOP-carrying op of the payload gets the count the
textbook formula gives for its shapes, and the right kernel class; the rest count zero."""

import torch
from executorch.exir import to_edge_transform_and_lower

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from tools.bench import op_cost


class Mixed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dense = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)  # 16x16 -> 8x8
        self.depthwise = torch.nn.Conv2d(8, 8, 5, padding=2, groups=8)
        self.pointwise = torch.nn.Conv2d(8, 16, 1)
        self.up = torch.nn.ConvTranspose2d(16, 4, 2, stride=2)  # 8x8 -> 16x16
        self.fc = torch.nn.Linear(16 * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.dense(x))
        y = self.pointwise(self.depthwise(y))
        y = self.up(y)  # [1, 4, 16, 16]
        y = y.reshape(1, 4, 256)
        return torch.bmm(y, y.transpose(1, 2)) + self.fc(y).sum()


def test_flops_and_classes_follow_the_shapes() -> None:
    exported = torch.export.export(Mixed().eval(), (torch.randn(1, 3, 16, 16),))
    edge = to_edge_transform_and_lower(exported, partitioner=[CpuPartitioner()])
    costs = op_cost.program_costs(edge.exported_program())
    counted = sorted((c.kind, c.flops) for c in costs.values() if c.flops)
    assert counted == sorted(
        [
            (op_cost.DENSE_CONV, 2 * (8 * 8 * 8) * (3 * 3 * 3)),
            (op_cost.DEPTHWISE_CONV, 2 * (8 * 8 * 8) * (5 * 5)),
            (op_cost.POINTWISE_CONV, 2 * (16 * 8 * 8) * 8),
            # each of the 16x8x8 inputs meets 4 output channels x 2x2 taps
            (op_cost.TRANSPOSED_CONV, 2 * (16 * 8 * 8) * (4 * 2 * 2)),
            (op_cost.GEMM, 2 * (4 * 10) * 256),  # linear [4, 256] x [256, 10]
            (op_cost.GEMM, 2 * (4 * 4) * 256),  # bmm [1, 4, 256] x [1, 256, 4]
        ]
    )
    shapes = {c.shape for c in costs.values() if c.flops}
    assert "3x3/s2x2 3->8 @8x8" in shapes and "5x5 g8 8->8 @8x8" in shapes
    assert all(c.kind == op_cost.MEMORY_BOUND for c in costs.values() if not c.flops)
    assert any(not c.flops for c in costs.values())  # relu, add, sum, reshape...


def test_gflops() -> None:
    assert op_cost.gflops(2e9, 1e6) == 2.0  # 2 GFLOP in one second
    assert op_cost.gflops(1.0, 0.0) == 0.0
