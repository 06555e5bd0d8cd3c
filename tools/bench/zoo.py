"""The model zoo of issues 17 and 19: model families beyond the ResNet/MobileNetV2 examples.

The project's own definitions, written with `torch.nn` only (architectures follow the published
shapes of each family; no code is taken from torchvision or timm):

- ``mobilenet_v3``: inverted residuals with 3x3 and 5x5 depthwise convolutions, hardswish and
  ReLU, squeeze-excite gated by hardsigmoid, a hardswish classifier head.
- ``efficientnet``: MBConv blocks with SiLU, squeeze-excite gated by sigmoid (3x3 and 5x5).
- ``resnet50``: ResNet-50's bottleneck blocks (1x1 reduce, 3x3, 1x1 expand by 4).
- ``unet``: an encoder of double conv-BN-ReLU with 2x2 max pooling, a decoder of ConvTranspose2d +
  BN + ReLU with concatenated skips, one decoder level upsampled bilinearly and a nearest-neighbour
  upsampled side output, so resampling is covered.
- ``speech_conv1d``: a Conv1d-BN-ReLU stack over log-mel features (one strided, one dilated
  layer), per-frame log_softmax over the classes.
- ``vit``, ``llama``, ``text_cnn``: the transformer and sequence families (`zoo_sequence.py`):
  a ViT-Tiny-style image transformer, a Llama-style decoder over int64 token ids, a text CNN over
  int64 token ids returning logits and their argmax.

Every family comes in two sizes: ``small`` (what tests use: lowers and runs on the reference
kernels in well under a second) and ``full`` (what the zoo benchmark uses: each runs in about
2-40 ms in eager PyTorch on 2 threads of this 2-core machine; 224x224 images for the
classifiers, 1x3x128x128 for the UNet, 1x80x200 features for the speech model).

``create(name, size)`` (or ``ZOO[name].create(size)``) returns the model in eval mode and its
example inputs. Weights are seeded and batch-norm statistics randomised from a fixed seed (fresh
BN layers are the identity, so a wrongly folded batch norm would go unnoticed); inputs come from a
seeded generator: the same call gives the same model and tensors every time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from tools.bench.zoo_sequence import LlamaLike, TextCNN, ViTLike
from tools.lower.examples import randomize_batch_norm_statistics

SIZES = ("small", "full")

Inputs = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class InputSpec:
    """One example input: float32 from a normal distribution, or int64 token ids below `vocab`."""

    shape: tuple[int, ...]
    vocab: int | None = None

    def make(self, generator: torch.Generator) -> torch.Tensor:
        if self.vocab is None:
            return torch.randn(*self.shape, generator=generator)
        return torch.randint(0, self.vocab, self.shape, generator=generator, dtype=torch.int64)

    def __str__(self) -> str:
        return str(list(self.shape)) + (f" ids<{self.vocab}" if self.vocab is not None else "")


def _divisible(value: float, divisor: int = 8) -> int:
    """`value` rounded to the nearest multiple of `divisor` (at least `divisor`), never more than
    10% below it: how the mobile families round scaled channel counts."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def conv_bn_act(
    c_in: int,
    c_out: int,
    kernel: int,
    stride: int = 1,
    groups: int = 1,
    act: Callable[[], nn.Module] | None = nn.ReLU,
) -> nn.Sequential:
    """A 2D convolution (same padding, no bias), batch norm and an optional activation."""
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    """Channel attention: global average, reduce, activation, expand, gate, scale the input."""

    def __init__(
        self,
        channels: int,
        squeezed: int,
        act: Callable[[], nn.Module],
        gate: Callable[[], nn.Module],
    ) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.act = act()
        self.expand = nn.Conv2d(squeezed, channels, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = nn.functional.adaptive_avg_pool2d(x, 1)
        scale = self.gate(self.expand(self.act(self.reduce(scale))))
        return x * scale


# --- MobileNetV3-style ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MobileBlock:
    """One inverted residual of the MobileNetV3 family (channels before the width multiplier)."""

    kernel: int
    expanded: int
    out: int
    se: bool
    hardswish: bool  # else ReLU
    stride: int


# MobileNetV3-Small's published layer table (kernel, expansion, output, SE, activation, stride).
_MOBILENET_V3_BLOCKS = (
    MobileBlock(3, 16, 16, True, False, 2),
    MobileBlock(3, 72, 24, False, False, 2),
    MobileBlock(3, 88, 24, False, False, 1),
    MobileBlock(5, 96, 40, True, True, 2),
    MobileBlock(5, 240, 40, True, True, 1),
    MobileBlock(5, 240, 40, True, True, 1),
    MobileBlock(5, 120, 48, True, True, 1),
    MobileBlock(5, 144, 48, True, True, 1),
    MobileBlock(5, 288, 96, True, True, 2),
    MobileBlock(5, 576, 96, True, True, 1),
    MobileBlock(5, 576, 96, True, True, 1),
)


class MobileInvertedResidual(nn.Module):
    """Expand 1x1, depthwise kxk, optional squeeze-excite (hardsigmoid gate), project 1x1."""

    def __init__(self, c_in: int, hidden: int, c_out: int, block: MobileBlock) -> None:
        super().__init__()
        act: Callable[[], nn.Module] = nn.Hardswish if block.hardswish else nn.ReLU
        layers: list[nn.Module] = []
        if hidden != c_in:
            layers.append(conv_bn_act(c_in, hidden, 1, act=act))
        layers.append(conv_bn_act(hidden, hidden, block.kernel, block.stride, hidden, act))
        if block.se:
            layers.append(SqueezeExcite(hidden, _divisible(hidden / 4), nn.ReLU, nn.Hardsigmoid))
        layers.append(conv_bn_act(hidden, c_out, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.residual = block.stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV3Like(nn.Module):
    """Hardswish stem, MobileNetV3-Small's blocks scaled by `width`, hardswish classifier head."""

    def __init__(self, width: float, blocks: int, head: int, classes: int) -> None:
        super().__init__()
        c_in = _divisible(16 * width)
        layers: list[nn.Module] = [conv_bn_act(3, c_in, 3, 2, act=nn.Hardswish)]
        for block in _MOBILENET_V3_BLOCKS[:blocks]:
            hidden, c_out = _divisible(block.expanded * width), _divisible(block.out * width)
            layers.append(MobileInvertedResidual(c_in, hidden, c_out, block))
            c_in = c_out
        last = 6 * c_in
        layers.append(conv_bn_act(c_in, last, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(last, head), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(head, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# --- EfficientNet-style ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MBConvStage:
    """A stage of EfficientNet MBConv blocks (channels and repeats before the multipliers)."""

    expand: int
    kernel: int
    stride: int
    out: int
    repeats: int


# EfficientNet-B0's published stages (expansion, kernel, stride, output channels, repeats).
_EFFICIENTNET_STAGES = (
    MBConvStage(1, 3, 1, 16, 1),
    MBConvStage(6, 3, 2, 24, 2),
    MBConvStage(6, 5, 2, 40, 2),
    MBConvStage(6, 3, 2, 80, 3),
    MBConvStage(6, 5, 1, 112, 3),
    MBConvStage(6, 5, 2, 192, 4),
    MBConvStage(6, 3, 1, 320, 1),
)


class MBConv(nn.Module):
    """Expand 1x1 (SiLU), depthwise kxk (SiLU), squeeze-excite (SiLU, sigmoid gate), project."""

    def __init__(self, c_in: int, c_out: int, expand: int, kernel: int, stride: int) -> None:
        super().__init__()
        hidden = c_in * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(conv_bn_act(c_in, hidden, 1, act=nn.SiLU))
        layers += [
            conv_bn_act(hidden, hidden, kernel, stride, hidden, nn.SiLU),
            SqueezeExcite(hidden, max(1, c_in // 4), nn.SiLU, nn.Sigmoid),
            conv_bn_act(hidden, c_out, 1, act=None),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class EfficientNetLike(nn.Module):
    """SiLU stem, EfficientNet-B0's stages scaled by `width` and `depth`, pooled classifier."""

    def __init__(self, width: float, depth: float, stages: int, classes: int) -> None:
        super().__init__()
        c_in = _divisible(32 * width)
        layers: list[nn.Module] = [conv_bn_act(3, c_in, 3, 2, act=nn.SiLU)]
        for stage in _EFFICIENTNET_STAGES[:stages]:
            c_out = _divisible(stage.out * width)
            repeats = max(1, round(stage.repeats * depth))
            for i in range(repeats):
                stride = stage.stride if i == 0 else 1
                layers.append(MBConv(c_in, c_out, stage.expand, stage.kernel, stride))
                c_in = c_out
        last = 4 * c_in
        layers.append(conv_bn_act(c_in, last, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(last, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1)
        return self.head(x)


# --- ResNet-50-style ------------------------------------------------------------------------------


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand by 4, each conv-BN; projection when shapes change."""

    expansion = 4

    def __init__(self, c_in: int, mid: int, stride: int) -> None:
        super().__init__()
        c_out = mid * self.expansion
        self.body = nn.Sequential(
            conv_bn_act(c_in, mid, 1),
            conv_bn_act(mid, mid, 3, stride),
            conv_bn_act(mid, c_out, 1, act=None),
        )
        self.shortcut: nn.Module = (
            conv_bn_act(c_in, c_out, 1, stride, act=None)
            if stride != 1 or c_in != c_out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class ResNet50Like(nn.Module):
    """ResNet-50's layout (7x7 stem, max pool, bottleneck stages, average pool, classifier)."""

    def __init__(self, width: int, depth: Sequence[int], classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn_act(3, width, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks: list[nn.Module] = []
        c_in = width
        for stage, count in enumerate(depth):
            mid = width * 2**stage
            for i in range(count):
                blocks.append(Bottleneck(c_in, mid, 2 if stage > 0 and i == 0 else 1))
                c_in = mid * Bottleneck.expansion
        self.stages = nn.Sequential(*blocks)
        self.head = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.stages(self.stem(x)), 1)
        return self.head(torch.flatten(x, 1))


# --- UNet -----------------------------------------------------------------------------------------


def _double_conv(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(conv_bn_act(c_in, c_out, 3), conv_bn_act(c_out, c_out, 3))


class UpTransposed(nn.Module):
    """Decoder level: 2x2 stride-2 ConvTranspose2d + BN + ReLU, concat the skip, double conv."""

    def __init__(self, c_in: int, c_skip: int, c_out: int) -> None:
        super().__init__()
        self.up = nn.Sequential(
            nn.ConvTranspose2d(c_in, c_out, 2, stride=2, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(),
        )
        self.conv = _double_conv(c_out + c_skip, c_out)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([self.up(x), skip], dim=1))


class UpBilinear(nn.Module):
    """Decoder level: bilinear 2x upsampling, 1x1 conv-BN-ReLU, concat the skip, double conv."""

    def __init__(self, c_in: int, c_skip: int, c_out: int) -> None:
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.reduce = conv_bn_act(c_in, c_out, 1)
        self.conv = _double_conv(c_out + c_skip, c_out)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([self.reduce(self.up(x)), skip], dim=1))


class UNetLike(nn.Module):
    """A UNet of `levels` max-pooled encoder levels and a mirrored decoder.

    The decoder's second-finest level upsamples bilinearly, the others with ConvTranspose2d + BN
    + ReLU. A coarse side head (1x1 conv on the bottleneck, nearest-neighbour upsampled to the
    output size) is added to the logits, as deep-supervision heads do.
    """

    def __init__(self, base: int, levels: int, classes: int) -> None:
        super().__init__()
        widths = [base * 2**i for i in range(levels + 1)]
        self.inc = _double_conv(3, widths[0])
        self.down = nn.ModuleList(
            nn.Sequential(nn.MaxPool2d(2), _double_conv(widths[i], widths[i + 1]))
            for i in range(levels)
        )
        ups: list[nn.Module] = []
        for i in reversed(range(levels)):
            level = UpBilinear if i == 1 else UpTransposed
            ups.append(level(widths[i + 1], widths[i], widths[i]))
        self.up = nn.ModuleList(ups)
        self.out = nn.Conv2d(widths[0], classes, 1)
        self.side = nn.Conv2d(widths[-1], classes, 1)
        self.side_up = nn.Upsample(scale_factor=2**levels, mode="nearest")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.inc(x)]
        for down in self.down:
            skips.append(down(skips[-1]))
        y = skips.pop()
        side = self.side_up(self.side(y))
        for up in self.up:
            y = up(y, skips.pop())
        return self.out(y) + side


# --- Speech: Conv1d stack -------------------------------------------------------------------------


class SpeechConv1d(nn.Module):
    """Conv1d-BN-ReLU layers over (batch, features, frames), then per-frame class log-probs.

    The second layer halves the frame rate (stride 2), the third is dilated; the output is
    (batch, frames, classes) log_softmax over the classes.
    """

    def __init__(self, features: int, channels: int, layers: int, classes: int) -> None:
        super().__init__()
        stack: list[nn.Module] = []
        c_in = features
        for i in range(layers):
            kernel = 5 if i == 0 else 3
            stride = 2 if i == 1 else 1
            dilation = 2 if i == 2 else 1
            padding = dilation * (kernel - 1) // 2
            stack += [
                nn.Conv1d(c_in, channels, kernel, stride, padding, dilation, bias=False),
                nn.BatchNorm1d(channels),
                nn.ReLU(),
            ]
            c_in = channels
        self.body = nn.Sequential(*stack)
        self.classifier = nn.Conv1d(channels, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.classifier(self.body(x)).transpose(1, 2)
        return torch.log_softmax(logits, dim=-1)


# --- the zoo --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZooModel:
    """A model family: how to build it and its inputs at each size."""

    name: str
    description: str
    build: Mapping[str, Callable[[], nn.Module]]  # size -> model (random init)
    inputs: Mapping[str, Sequence[InputSpec]]  # size -> each example input

    def create(self, size: str = "small", seed: int = 0) -> tuple[nn.Module, Inputs]:
        """The model at `size` in eval mode (seeded weights, randomised BN statistics) and its
        example inputs (from a generator seeded with `seed`)."""
        if size not in self.build:
            raise ValueError(f"zoo model {self.name!r} has no size {size!r} (sizes: {SIZES})")
        torch.manual_seed(0)
        model = randomize_batch_norm_statistics(self.build[size]()).eval()
        generator = torch.Generator().manual_seed(seed)
        return model, tuple(spec.make(generator) for spec in self.inputs[size])


ZOO: Mapping[str, ZooModel] = {
    zoo_model.name: zoo_model
    for zoo_model in (
        ZooModel(
            name="mobilenet_v3",
            description="MobileNetV3-Small-style: hardswish, SE with hardsigmoid, 3x3/5x5 "
            "depthwise inverted residuals",
            build={
                "small": lambda: MobileNetV3Like(width=0.5, blocks=5, head=64, classes=10),
                "full": lambda: MobileNetV3Like(width=1.0, blocks=11, head=1024, classes=1000),
            },
            inputs={"small": [InputSpec((1, 3, 32, 32))], "full": [InputSpec((1, 3, 224, 224))]},
        ),
        ZooModel(
            name="efficientnet",
            description="EfficientNet-B0-style: MBConv with SiLU, SE with sigmoid, 3x3/5x5",
            build={
                "small": lambda: EfficientNetLike(width=0.25, depth=0.5, stages=4, classes=10),
                "full": lambda: EfficientNetLike(width=0.75, depth=0.75, stages=7, classes=1000),
            },
            inputs={"small": [InputSpec((1, 3, 32, 32))], "full": [InputSpec((1, 3, 224, 224))]},
        ),
        ZooModel(
            name="resnet50",
            description="ResNet-50-style: bottleneck blocks (1x1, 3x3, 1x1 x4), max-pool stem",
            build={
                "small": lambda: ResNet50Like(width=8, depth=(1, 1), classes=10),
                "full": lambda: ResNet50Like(width=32, depth=(3, 4, 6, 3), classes=1000),
            },
            inputs={"small": [InputSpec((1, 3, 32, 32))], "full": [InputSpec((1, 3, 224, 224))]},
        ),
        ZooModel(
            name="unet",
            description="UNet: max-pool encoder, ConvTranspose2d+BN+ReLU decoder with cat skips, "
            "one bilinear level, nearest-upsampled side head",
            build={
                "small": lambda: UNetLike(base=4, levels=3, classes=2),
                "full": lambda: UNetLike(base=16, levels=4, classes=2),
            },
            inputs={"small": [InputSpec((1, 3, 32, 32))], "full": [InputSpec((1, 3, 128, 128))]},
        ),
        ZooModel(
            name="speech_conv1d",
            description="speech Conv1d-BN-ReLU stack over log-mel frames, log_softmax over classes",
            build={
                "small": lambda: SpeechConv1d(features=16, channels=16, layers=4, classes=8),
                "full": lambda: SpeechConv1d(features=80, channels=256, layers=6, classes=40),
            },
            inputs={"small": [InputSpec((1, 16, 24))], "full": [InputSpec((1, 80, 200))]},
        ),
        ZooModel(
            name="vit",
            description="ViT-Tiny-style: patch conv, class token, layer norm, softmax attention, "
            "GELU MLP",
            build={
                "small": lambda: ViTLike(image=32, patch=8, dim=32, depth=2, heads=2, classes=10),
                "full": lambda: ViTLike(
                    image=224, patch=16, dim=192, depth=12, heads=3, classes=1000
                ),
            },
            inputs={"small": [InputSpec((1, 3, 32, 32))], "full": [InputSpec((1, 3, 224, 224))]},
        ),
        ZooModel(
            name="llama",
            description="Llama-style decoder: embedding, RMSNorm (pow/rsqrt), rotary embeddings, "
            "causal SDPA, SwiGLU",
            build={
                "small": lambda: LlamaLike(
                    vocab=64, dim=32, depth=2, heads=2, hidden=64, max_tokens=16
                ),
                "full": lambda: LlamaLike(
                    vocab=8000, dim=288, depth=6, heads=6, hidden=768, max_tokens=128
                ),
            },
            inputs={
                "small": [InputSpec((1, 12), vocab=64)],
                "full": [InputSpec((1, 128), vocab=8000)],
            },
        ),
        ZooModel(
            name="text_cnn",
            description="text CNN on int64 tokens: embedding, conv1d branches, amax, cat, "
            "linear, argmax",
            build={
                "small": lambda: TextCNN(vocab=50, dim=16, channels=8, widths=(3, 5), classes=4),
                "full": lambda: TextCNN(
                    vocab=20000, dim=128, channels=128, widths=(3, 4, 5), classes=10
                ),
            },
            inputs={
                "small": [InputSpec((1, 20), vocab=50)],
                "full": [InputSpec((1, 256), vocab=20000)],
            },
        ),
    )
}


def get(name: str) -> ZooModel:
    """The zoo model called `name`; a ValueError listing the known names otherwise."""
    if name not in ZOO:
        raise ValueError(f"unknown zoo model {name!r}; known: {', '.join(ZOO)}")
    return ZOO[name]


def create(name: str, size: str = "small", seed: int = 0) -> tuple[nn.Module, Inputs]:
    """`get(name).create(size, seed)`: the model in eval mode and its example inputs."""
    return get(name).create(size, seed)
