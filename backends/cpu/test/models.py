"""Small models shared by the CPU delegate's AOT tests (torch.nn only; no downloads)."""

import torch


class ConvBN(torch.nn.Module):
    """conv -> batch norm (eval) -> relu: preprocess folds the batch norm into the conv."""

    def __init__(self, in_channels: int = 8, out_channels: int = 32) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class LinearBN(torch.nn.Module):
    """linear -> batch norm (eval): needs aten.linear kept whole for the fusion to see it."""

    def __init__(self, in_features: int = 64, out_features: int = 96) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(in_features, out_features)
        self.bn = torch.nn.BatchNorm1d(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x))


class SmallCNN(torch.nn.Module):
    """A float CNN touching conv, BN, pooling, reductions, reshapes, linear and activations."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        y = torch.nn.functional.hardtanh(self.bn2(self.conv2(y)))
        y = torch.nn.functional.avg_pool2d(y, 2) * 0.5
        y = y.mean(dim=(2, 3))
        z = torch.cat([y, torch.tanh(y)], dim=0)
        return torch.sigmoid(self.fc(z)).permute(1, 0).unsqueeze(0)


class IndexHeavy(torch.nn.Module):
    """Integer code: argmax -> index.Tensor -> index_put, bool masks, int64 arithmetic."""

    def forward(self, scores: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, ...]:
        best = torch.argmax(scores, dim=1)
        rows = torch.arange(scores.shape[0])
        picked = table[rows, best]
        mask = (picked > 0) & (best != 2)
        updated = torch.index_put(
            torch.zeros_like(table), (rows, best), torch.where(mask, picked, -picked)
        )
        code = (best * 3 + 1) % 5
        gathered = torch.gather(table, 1, best.unsqueeze(1)).squeeze(1)
        return updated, code.cumsum(0), mask, gathered


def cnn_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)),)


def index_heavy_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return (
        torch.randn(6, 5, generator=generator),
        torch.randint(-9, 10, (6, 5), generator=generator),
    )


def randomize_batch_norm(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Non-trivial running statistics and affine parameters, so folding changes the weights."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            size = module.num_features
            assert module.running_mean is not None and module.running_var is not None
            with torch.no_grad():
                module.running_mean.copy_(torch.randn(size, generator=generator))
                module.running_var.copy_(torch.rand(size, generator=generator) + 0.5)
                module.weight.copy_(torch.randn(size, generator=generator))
                module.bias.copy_(torch.randn(size, generator=generator))
    return model.eval()
