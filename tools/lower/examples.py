"""Built-in example models of the lowering tool, written with `torch.nn` only.

Each example comes in two sizes: ``small`` (what tests and the default `bazel run //tools/lower`
use: lowers and runs on the reference kernels in seconds) and ``full`` (the shapes the benchmark
uses: 1x3x224x224 images, a batch of 32 for the MLP). Models are built in eval mode with seeded
weights and non-trivial batch-norm statistics, so a wrongly folded batch norm changes the output.
Sample inputs are deterministic (a seeded generator), so a run can be reproduced exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

SIZES = ("small", "full")


@dataclass(frozen=True)
class ExampleSpec:
    """The sizes one example is built with."""

    width: int
    image: int = 0
    batch: int = 1
    depth: tuple[int, ...] = ()


@dataclass(frozen=True)
class Example:
    """A named example: how to build it at a size, and its sample inputs."""

    name: str
    description: str
    build: Callable[[ExampleSpec], nn.Module]
    inputs: Callable[[ExampleSpec, torch.Generator], tuple[torch.Tensor, ...]]
    specs: dict[str, ExampleSpec]

    def model(self, size: str = "small") -> nn.Module:
        """The model at ``size``, in eval mode, with the same weights on every call."""
        torch.manual_seed(0)
        model = self.build(self._spec(size))
        randomize_batch_norm_statistics(model)
        return model.eval()

    def sample_inputs(self, size: str = "small", seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Deterministic sample inputs for ``size`` (same seed, same tensors)."""
        generator = torch.Generator().manual_seed(seed)
        return self.inputs(self._spec(size), generator)

    def _spec(self, size: str) -> ExampleSpec:
        if size not in self.specs:
            raise ValueError(f"example {self.name!r} has no size {size!r} (sizes: {SIZES})")
        return self.specs[size]


def randomize_batch_norm_statistics(model: nn.Module, seed: int = 1) -> nn.Module:
    """Gives every batch norm of `model` non-trivial statistics and affine parameters (seeded).

    Fresh BN layers are the identity (mean 0, var 1, weight 1, bias 0): folding them wrongly would
    go unnoticed. Seeded, so the model is the same on every call. Returns `model`.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                n = module.num_features
                assert module.running_mean is not None and module.running_var is not None
                module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(n, generator=generator) * 0.5 + 0.75)
                module.weight.copy_(torch.rand(n, generator=generator) * 0.5 + 0.75)
                module.bias.copy_(torch.randn(n, generator=generator) * 0.1)
    return model


# --- ResNet-shaped: conv-BN-ReLU with residual basic blocks ---------------------------------------


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    )


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 conv-BN, a projection shortcut when the shape changes."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            _conv_bn(c_in, c_out, 3, stride), nn.ReLU(), _conv_bn(c_out, c_out, 3)
        )
        self.shortcut: nn.Module = (
            _conv_bn(c_in, c_out, 1, stride) if stride != 1 or c_in != c_out else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class ResNetLike(nn.Module):
    """ResNet-18's layout (stem, four stages of basic blocks, pooling, classifier), scalable."""

    def __init__(self, width: int, depth: tuple[int, ...], classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            _conv_bn(3, width, 7, 2), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1)
        )
        blocks: list[nn.Module] = []
        c_in = width
        for stage, count in enumerate(depth):
            c_out = width * 2**stage
            for i in range(count):
                blocks.append(BasicBlock(c_in, c_out, 2 if stage > 0 and i == 0 else 1))
                c_in = c_out
        self.stages = nn.Sequential(*blocks)
        self.head = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


# --- MobileNet-shaped: inverted residuals with depthwise conv-BN ----------------------------------


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, 1x1 project, each conv-BN."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = c_in * expand
        self.use_residual = stride == 1 and c_in == c_out
        self.body = nn.Sequential(
            _conv_bn(c_in, hidden, 1),
            nn.ReLU6(),
            _conv_bn(hidden, hidden, 3, stride, groups=hidden),
            nn.ReLU6(),
            _conv_bn(hidden, c_out, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.use_residual else y


# (expansion, output-channel multiple of width, stride) of MobileNetV2's first 11 blocks.
_MOBILENET_BLOCKS = (
    (1, 1, 1),
    (6, 1.5, 2),
    (6, 1.5, 1),
    (6, 2, 2),
    (6, 2, 1),
    (6, 2, 1),
    (6, 4, 2),
    (6, 4, 1),
    (6, 4, 1),
    (6, 4, 1),
    (6, 6, 1),
)


class MobileNetLike(nn.Module):
    """MobileNetV2's first blocks (depthwise-separable, ReLU6), pooling and a classifier."""

    def __init__(self, width: int, blocks: int, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 2 * width, 3, 2), nn.ReLU6()]
        c_in = 2 * width
        for expand, multiple, stride in _MOBILENET_BLOCKS[:blocks]:
            c_out = int(width * multiple)
            layers.append(InvertedResidual(c_in, c_out, stride, expand))
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.head(torch.flatten(x, 1))


# --- MLP with BatchNorm1d -------------------------------------------------------------------------


class MlpBn(nn.Module):
    """Linear-BatchNorm1d-ReLU layers and a classifier: the linear-BN folding case."""

    def __init__(self, width: int, depth: int, features: int, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = features
        for _ in range(depth):
            layers += [nn.Linear(c_in, width), nn.BatchNorm1d(width), nn.ReLU()]
            c_in = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


# --- integer / index model ------------------------------------------------------------------------


class IndexModel(nn.Module):
    """Gathers rows by int64 index, derives masks and integer results, scatters back.

    Covers what must stay exact inside the delegate: int64 indices (`index.Tensor`, `index_put`),
    bool masks, integer arithmetic and reductions, `argmax`, an int32 cast and `where`.
    """

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(
        self, table: torch.Tensor, rows: torch.Tensor, codes: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        picked = table[rows]  # index.Tensor with int64 indices
        mask = picked > 0  # bool
        positives = mask.sum(dim=1)  # int64 reduction of a bool
        best = torch.argmax(self.proj(picked), dim=1)  # int64
        # Integer arithmetic, exact. No `%`: ExecuTorch 1.5.1's remainder kernel truncates toward
        # zero for negative ints (torch floors), so it would differ from eager.
        shifted = (codes * 3 + best).to(torch.int32)
        mixed = torch.where(shifted > 10, shifted, -shifted)
        scattered = torch.index_put(torch.zeros_like(table), (rows,), picked * mask)
        return positives, mixed, mask, scattered


# --- Llama-style decoder with a KV cache ---------------------------------------------------------


def _llm_config(spec: ExampleSpec) -> Any:
    from tools.bench.llm_models import LlmConfig

    # width: the model dim; depth: (layers, vocab, max_seq); batch: the prefill's token count.
    layers, vocab, max_seq = spec.depth
    return LlmConfig(
        vocab=vocab, dim=spec.width, layers=layers, heads=4, hidden=2 * spec.width, max_seq=max_seq
    )


def _llm_model(spec: ExampleSpec) -> nn.Module:
    from tools.bench.llm_models import KVCacheDecoder

    return KVCacheDecoder(_llm_config(spec))


def _llm_inputs(spec: ExampleSpec, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    # A prefill from position 0: every visible cache position is written by this call, so the
    # outputs do not depend on what an earlier call left in the caches.
    tokens = torch.randint(0, spec.depth[1], (1, spec.batch), generator=generator)
    return tokens, torch.arange(spec.batch, dtype=torch.int64)


def _image_inputs(spec: ExampleSpec, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    return (torch.randn(spec.batch, 3, spec.image, spec.image, generator=generator),)


def _mlp_inputs(spec: ExampleSpec, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    return (torch.randn(spec.batch, spec.depth[1], generator=generator),)


def _index_inputs(spec: ExampleSpec, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    table = torch.randn(spec.batch, spec.width, generator=generator)
    # Distinct rows, so index_put's result does not depend on write order.
    rows = torch.randperm(spec.batch, generator=generator)[: spec.batch // 2]
    codes = torch.randint(-50, 50, (spec.batch // 2,), generator=generator)
    return table, rows, codes


EXAMPLES: dict[str, Example] = {
    example.name: example
    for example in (
        Example(
            name="resnet",
            description="ResNet-18-shaped conv-BN-ReLU net with residual blocks",
            build=lambda s: ResNetLike(s.width, s.depth),
            inputs=_image_inputs,
            specs={
                "small": ExampleSpec(width=8, image=32, depth=(1, 1)),
                "full": ExampleSpec(width=64, image=224, depth=(2, 2, 2, 2)),
            },
        ),
        Example(
            name="mobilenet",
            description="MobileNetV2-shaped depthwise-separable conv-BN net (ReLU6)",
            build=lambda s: MobileNetLike(s.width, s.depth[0]),
            inputs=_image_inputs,
            specs={
                "small": ExampleSpec(width=8, image=32, depth=(3,)),
                "full": ExampleSpec(width=16, image=224, depth=(11,)),
            },
        ),
        Example(
            name="mlp_bn",
            description="MLP of Linear-BatchNorm1d-ReLU layers",
            build=lambda s: MlpBn(s.width, s.depth[0], s.depth[1]),
            inputs=_mlp_inputs,
            specs={
                "small": ExampleSpec(width=32, batch=8, depth=(2, 16)),
                "full": ExampleSpec(width=1024, batch=32, depth=(3, 1024)),
            },
        ),
        Example(
            name="index",
            description="integer/index model: int64 gather and scatter, bool masks, int math",
            build=lambda s: IndexModel(s.width),
            inputs=_index_inputs,
            specs={
                "small": ExampleSpec(width=16, batch=8),
                "full": ExampleSpec(width=512, batch=256),
            },
        ),
        Example(
            name="llm",
            description="Llama-style decoder (RMSNorm, rotary, SwiGLU) with K/V caches as mutable "
            "buffers written at input_pos; inputs: a prefill's tokens and positions",
            build=_llm_model,
            inputs=_llm_inputs,
            specs={
                "small": ExampleSpec(width=128, batch=8, depth=(2, 256, 64)),
                "full": ExampleSpec(width=512, batch=128, depth=(4, 4096, 256)),
            },
        ),
    )
}

DEFAULT_EXAMPLE = "resnet"


def get_example(name: str) -> Example:
    """The example called ``name``; a ValueError listing the known names otherwise."""
    if name not in EXAMPLES:
        raise ValueError(f"unknown example {name!r}; known examples: {', '.join(EXAMPLES)}")
    return EXAMPLES[name]
