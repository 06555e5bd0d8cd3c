"""The CPU delegate's route table: the single source of truth for which Edge ops it executes.

A route maps an Edge-dialect op (keyed like ``"aten.convolution.default"``) to the ExecuTorch
out-variant kernel that executes it (``"aten::convolution.out"``), the provider that runs it,
per-route flags and, where the kernel covers only part of the op, a check of a node's arguments.
The partitioner claims only ops listed here, the serializer writes each op's route and kernel
into the payload, and the C++ runtime binds the payload's kernel names through ExecuTorch's
operator registry: there is no second list on the runtime side.
"""

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import torch

from backends.cpu import quantized_ops


class Provider(enum.IntEnum):
    """Which implementation executes a route; values mirror `Provider` in schema.fbs."""

    REFERENCE = 0  # ExecuTorch's own kernels, through the operator registry
    OPTIMIZED = 1  # the optimized provider; the runtime falls back to REFERENCE when it declines


class RouteFlag(enum.IntFlag):
    """Per-route flags; bit values mirror `RouteFlags` in schema.fbs."""

    NONE = 0
    # Tensor-list arguments are `Tensor?[]` in the kernel schema (index.Tensor, index_put): the
    # runtime binds them as lists of optional tensors even when every entry is present.
    OPTIONAL_TENSOR_LISTS = 1


# Why ExecuTorch's kernel cannot run this node's arguments (a human-readable detail), or None when
# it can: for kernels that cover only part of their op's domain (e.g. constant_pad_nd's kernel
# pads but does not crop). The partitioner leaves such a node out (`LeaveOutReason.ARGUMENTS`).
ArgumentCheck = Callable[[torch.fx.Node], str | None]


@dataclass(frozen=True)
class Route:
    """How the CPU runtime executes one Edge op."""

    op: str  # Edge op key: "<namespace>.<name>.<overload>"
    # out-variant operator name in ExecuTorch's registry (or BUILTIN_KERNELS): "<ns>::<name>.<ov>"
    kernel: str
    provider: Provider = Provider.REFERENCE
    flags: RouteFlag = RouteFlag.NONE
    # to_edge would decompose this op, yet the delegate (or a preprocess fusion) wants it whole;
    # the partitioner keeps it whole only for the nodes it claims (ops_to_not_decompose).
    keep_undecomposed: bool = False
    # Arguments the kernel cannot take (see ArgumentCheck); None: it takes every node of the op.
    check_args: ArgumentCheck | None = None

    def out_variant(self) -> torch._ops.OpOverload:
        """The out-variant OpOverload named by `kernel`; its schema orders the payload's args."""
        namespace, rest = self.kernel.split("::")
        if namespace == "quantized_decomposed":
            # The out variants come with ExecuTorch's quantized kernel library (torch loads it).
            import executorch.kernels.quantized  # noqa: F401
        name, overload = rest.split(".")
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def _r(op: str, kernel: str, **kwargs: object) -> Route:
    return Route(op, kernel, **kwargs)  # type: ignore[arg-type]


def _non_negative_padding(node: torch.fx.Node) -> str | None:
    # torch crops with negative padding; ExecuTorch's constant_pad_nd kernel rejects it at run time.
    pad = node.args[1] if len(node.args) > 1 else node.kwargs.get("pad")
    if isinstance(pad, (list, tuple)) and any(isinstance(p, int) and p < 0 for p in pad):
        return f"negative padding {list(pad)} (the kernel does not crop)"
    return None


def _float32_only(node: torch.fx.Node) -> str | None:
    # The runtime's built-in kernels (BUILTIN_KERNELS) take float32 only.
    value = node.meta.get("val")
    dtype = getattr(value, "dtype", None)
    if dtype != torch.float32:
        return f"dtype {dtype} (the built-in kernel takes float32 only)"
    return None


_INT32_RANGE = (-(2**31), 2**31 - 1)
_CONVOLUTION = "aten.convolution.default"


def _is_constant_input(node: object) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "placeholder"


def _quantization_scheme(node: torch.fx.Node) -> str | None:
    # quantize/dequantize with static per-tensor (or, for constant weights, per-channel) qparams
    # into int8/uint8 over its full range: what ExecuTorch's quantized kernels and our int8
    # kernels run. int16 or narrowed ranges are other schemes, left out. Two QAT forms are taken
    # too (FuseQATConvBN's output): a constant int32 conv bias, and a convolution's output
    # quantized per channel.
    dtype = node.args[-1] if len(node.args) >= 6 else None
    low, high = node.args[-3], node.args[-2]
    name = (op_key(node.target) or "..").split(".")[1]  # e.g. "quantize_per_tensor"
    if dtype == torch.int32 and name.startswith("dequantize"):
        if not _is_constant_input(node.args[0]):
            return "int32 dequantize of a computed tensor (only a constant conv bias)"
        if (low, high) != _INT32_RANGE:
            return f"int32 range [{low}, {high}] narrower than int32"
        return None
    if dtype not in quantized_ops.QUANTIZED_RANGES:
        return f"quantized dtype {dtype} (the delegate runs int8 and uint8)"
    full_low, full_high = quantized_ops.QUANTIZED_RANGES[dtype]  # type: ignore[index]
    if not (isinstance(low, int) and isinstance(high, int) and full_low <= low < high <= full_high):
        return f"quantized range [{low}, {high}] outside {dtype}"
    float_side = node.args[0] if name.startswith("quantize") else node
    value = float_side.meta.get("val") if isinstance(float_side, torch.fx.Node) else None
    if getattr(value, "dtype", None) != torch.float32:
        return f"float side of dtype {getattr(value, 'dtype', None)} (float32 only)"
    if name == "quantize_per_channel":
        return _conv_output_quantize(node)
    if name == "dequantize_per_channel" and not _is_constant_input(node.args[0]):
        source = node.args[0]
        if not (
            isinstance(source, torch.fx.Node)
            and op_key(source.target) == "quantized_decomposed.quantize_per_channel.default"
            and tuple(source.args[1:]) == tuple(node.args[1:])
            and _conv_output_quantize(source) is None
        ):
            return (
                "per-channel dequantize of a computed tensor (only constant weights and a "
                "convolution's per-channel output)"
            )
    return None


def _conv_output_quantize(quantize: torch.fx.Node) -> str | None:
    # A per-channel quantize of an activation is taken only as FuseQATConvBN leaves it: a
    # quantized convolution's output over its channels (axis 1), constant qparams, read only by
    # the matching dequantize. Preprocess fuses it into the int8 convolution.
    conv, scales, zero_points, axis = quantize.args[:4]
    is_conv = isinstance(conv, torch.fx.Node) and op_key(conv.target) == _CONVOLUTION
    dequantized = is_conv and all(
        isinstance(a, torch.fx.Node) and "dequantize" in str(op_key(a.target))
        for a in conv.args[:2]  # type: ignore[union-attr]
    )
    if axis != 1 or not dequantized:
        return "per-channel quantize of an activation (only a quantized convolution's output)"
    if not (_is_constant_input(scales) and _is_constant_input(zero_points)):
        return "per-channel quantize with computed scales or zero points"
    dequantize = "quantized_decomposed.dequantize_per_channel.default"
    if not quantize.users or any(
        op_key(u.target) != dequantize or tuple(u.args[1:]) != tuple(quantize.args[1:])
        for u in quantize.users
    ):
        return "per-channel quantize not read only by its matching dequantize"
    return None


# Out-variant kernels ExecuTorch's registry lacks that the runtime implements itself
# (runtime/builtin_kernels.cc, float32 only): the Reference provider binds these when the registry
# has no kernel of the name.
BUILTIN_KERNELS: frozenset[str] = frozenset(
    {
        "aten::hardswish.out",
        "aten::hardsigmoid.out",
        "aten::silu.out",
        # torchao's 8da4w linear, fused by preprocess (torchao/): runtime/linear_8da.cc.
        "et_cpu_quant::linear_8da.out",
        # torchao's weight-only linear and embedding (torchao/): runtime/linear_wo.cc.
        "et_cpu_quant::linear_wo.out",
        "et_cpu_quant::embedding_wo.out",
        # Rotary embeddings, fused by preprocess (fuse_rotary.py): runtime/builtin_kernels.cc.
        "et_cpu_quant::rotary.out",
        # RMSNorm, fused by preprocess (fuse_rms_norm.py): runtime/rms_norm.cc.
        "et_cpu_quant::rms_norm.out",
        # SDPA's guarded softmax, fused by preprocess (fuse_safe_softmax.py):
        # runtime/safe_softmax.cc.
        "et_cpu_quant::safe_softmax.out",
    }
)

# The delegate's int8 ops (quantized_ops.py): neither ExecuTorch's registry nor BUILTIN_KERNELS has
# them; only the Optimized provider (oneDNN int8 kernels:
# runtime/providers/optimized/onednn/quantized_kernels.cc) runs them, so there is no Reference
# fallback (init fails naming the op if oneDNN declines).
PROVIDER_KERNELS: frozenset[str] = frozenset(
    {
        "et_cpu_quant::conv2d.out",
        "et_cpu_quant::linear.out",
        "et_cpu_quant::max_pool2d.out",
        "et_cpu_quant::add.out",
    }
)

_OPTIONAL_LISTS = RouteFlag.OPTIONAL_TENSOR_LISTS
_OPT = Provider.OPTIMIZED

_ROUTE_LIST: tuple[Route, ...] = (
    # Convolution and matrix products: the optimized provider (oneDNN) takes them where its
    # constraints hold (float32, constant weights, ...), Reference otherwise.
    _r("aten.convolution.default", "aten::convolution.out", provider=_OPT),
    _r("aten.linear.default", "aten::linear.out", provider=_OPT, keep_undecomposed=True),
    _r("aten.addmm.default", "aten::addmm.out", provider=_OPT),
    _r("aten.mm.default", "aten::mm.out", provider=_OPT),
    _r("aten.bmm.default", "aten::bmm.out", provider=_OPT),
    # Elementwise arithmetic. Optimized: add/sub (alpha 1), mul, div on float32 with broadcasting,
    # and the float32 scalar forms as alpha * x + beta; other dtypes fall back to Reference.
    _r("aten.add.Tensor", "aten::add.out", provider=_OPT),
    _r("aten.add.Scalar", "aten::add.Scalar_out", provider=_OPT),
    _r("aten.sub.Tensor", "aten::sub.out", provider=_OPT),
    _r("aten.sub.Scalar", "aten::sub.Scalar_out", provider=_OPT),
    _r("aten.rsub.Scalar", "aten::rsub.Scalar_out", provider=_OPT),
    _r("aten.mul.Tensor", "aten::mul.out", provider=_OPT),
    _r("aten.mul.Scalar", "aten::mul.Scalar_out", provider=_OPT),
    _r("aten.div.Tensor", "aten::div.out", provider=_OPT),
    _r("aten.div.Tensor_mode", "aten::div.out_mode"),
    _r("aten.div.Scalar", "aten::div.Scalar_out", provider=_OPT),
    _r("aten.remainder.Tensor", "aten::remainder.Tensor_out"),
    _r("aten.remainder.Scalar", "aten::remainder.Scalar_out"),
    _r("aten.floor_divide.default", "aten::floor_divide.out"),
    _r("aten.neg.default", "aten::neg.out", provider=_OPT),
    _r("aten.abs.default", "aten::abs.out", provider=_OPT),
    _r("aten.minimum.default", "aten::minimum.out"),
    _r("aten.maximum.default", "aten::maximum.out"),
    # Powers and the elementwise math of normalizations, rotary embeddings and attention masks
    # (RMSNorm exports as pow -> mean -> add -> rsqrt -> mul). Optimized on float32: pow by a
    # scalar 2, 0.5, 1 or a non-integer exponent, rsqrt, sqrt, exp, log.
    _r("aten.pow.Tensor_Scalar", "aten::pow.Tensor_Scalar_out", provider=_OPT),
    _r("aten.pow.Tensor_Tensor", "aten::pow.Tensor_Tensor_out"),
    _r("aten.pow.Scalar", "aten::pow.Scalar_out"),
    *(
        _r(f"aten.{name}.default", f"aten::{name}.out", provider=_OPT)
        for name in ("rsqrt", "sqrt", "exp", "log")
    ),
    *(
        _r(f"aten.{name}.default", f"aten::{name}.out")
        for name in (
            "reciprocal",
            "expm1",
            "log1p",
            "log2",
            "sin",
            "cos",
            "erf",
            "floor",
            "ceil",
            "round",
            "trunc",
            "sign",
        )
    ),
    # Activations: the optimized provider runs float32 ones (standalone or fused after a
    # convolution/linear as a post-op), Reference the rest.
    _r("aten.relu.default", "aten::relu.out", provider=_OPT),
    _r("aten.clamp.default", "aten::clamp.out", provider=_OPT),
    _r("aten.clamp.Tensor", "aten::clamp.Tensor_out"),
    _r("aten.hardtanh.default", "aten::hardtanh.out", provider=_OPT),
    _r("aten.sigmoid.default", "aten::sigmoid.out", provider=_OPT),
    _r("aten.tanh.default", "aten::tanh.out", provider=_OPT),
    _r("aten.gelu.default", "aten::gelu.out", provider=_OPT),
    _r("aten.leaky_relu.default", "aten::leaky_relu.out", provider=_OPT),
    _r("aten.elu.default", "aten::elu.out", provider=_OPT),
    # ExecuTorch's registry has no out-variant kernel for these: the runtime carries float32 ones
    # (BUILTIN_KERNELS). Kept whole only for float32 nodes; to_edge decomposes the others into
    # add/clamp/mul/div and sigmoid/mul as before.
    *(
        _r(
            f"aten.{name}.default",
            f"aten::{name}.out",
            provider=_OPT,
            keep_undecomposed=True,
            check_args=_float32_only,
        )
        for name in ("hardswish", "hardsigmoid", "silu")
    ),
    # Softmax over one dim (classifier heads, per-frame class log-probabilities): Optimized on
    # float32, Reference otherwise.
    _r("aten._softmax.default", "aten::_softmax.out", provider=_OPT),
    _r("aten._log_softmax.default", "aten::_log_softmax.out", provider=_OPT),
    # Normalizations over the trailing dims (transformers; Optimized on float32) and over channel
    # groups.
    _r("aten.native_layer_norm.default", "aten::native_layer_norm.out", provider=_OPT),
    _r("aten.native_group_norm.default", "aten::native_group_norm.out"),
    # Pooling and reductions.
    # Optimized when the indices are unused (inference).
    _r(
        "aten.max_pool2d_with_indices.default",
        "aten::max_pool2d_with_indices.out",
        provider=_OPT,
    ),
    # Optimized without divisor_override / when the output size divides the input (equal
    # windows); Reference otherwise.
    _r("aten.avg_pool2d.default", "aten::avg_pool2d.out", provider=_OPT),
    _r("aten._adaptive_avg_pool2d.default", "aten::_adaptive_avg_pool2d.out", provider=_OPT),
    # Optimized over all spatial dims (global average pooling), Reference otherwise.
    _r("aten.mean.dim", "aten::mean.out", provider=_OPT),
    _r("aten.sum.dim_IntList", "aten::sum.IntList_out"),
    # amax / amin / argmax / argmin: Optimized (our own loops) on float32 over adjacent dims.
    _r("aten.amax.default", "aten::amax.out", provider=_OPT),
    _r("aten.amin.default", "aten::amin.out", provider=_OPT),
    _r("aten.argmax.default", "aten::argmax.out", provider=_OPT),
    _r("aten.argmin.default", "aten::argmin.out", provider=_OPT),
    _r("aten.max.dim", "aten::max.dim_max"),
    _r("aten.min.dim", "aten::min.dim_min"),
    _r("aten.var.correction", "aten::var.correction_out"),
    # Boolean reductions (attention masks: SDPA guards fully masked rows with any). Optimized on
    # bool over adjacent dims.
    _r("aten.any.dim", "aten::any.out", provider=_OPT),
    _r("aten.any.dims", "aten::any.dims_out", provider=_OPT),
    _r("aten.any.default", "aten::any.all_out", provider=_OPT),
    _r("aten.cumsum.default", "aten::cumsum.out"),
    # Shape and layout (Edge uses the *_copy forms).
    _r("aten.view_copy.default", "aten::view_copy.out"),
    _r("aten.permute_copy.default", "aten::permute_copy.out", provider=_OPT),  # float32
    _r("aten.cat.default", "aten::cat.out", provider=_OPT),  # float32: Optimized
    _r("aten.slice_copy.Tensor", "aten::slice_copy.Tensor_out"),
    _r("aten.select_copy.int", "aten::select_copy.int_out"),
    _r("aten.expand_copy.default", "aten::expand_copy.out"),
    _r("aten.squeeze_copy.dim", "aten::squeeze_copy.dim_out"),
    _r("aten.squeeze_copy.dims", "aten::squeeze_copy.dims_out"),
    _r("aten.unsqueeze_copy.default", "aten::unsqueeze_copy.out"),
    _r("aten.clone.default", "aten::clone.out"),
    _r("aten.flip.default", "aten::flip.out"),
    _r("aten.roll.default", "aten::roll.out"),
    _r("aten.repeat.default", "aten::repeat.out"),
    _r("aten.tril.default", "aten::tril.out"),
    _r("aten.pixel_shuffle.default", "aten::pixel_shuffle.out"),
    _r("aten.pixel_unshuffle.default", "aten::pixel_unshuffle.out"),
    _r("dim_order_ops._clone_dim_order.default", "dim_order_ops::_clone_dim_order.out"),
    _r("dim_order_ops._to_dim_order_copy.default", "dim_order_ops::_to_dim_order_copy.out"),
    _r("aten._to_copy.default", "aten::_to_copy.out"),
    _r(
        "aten.constant_pad_nd.default",
        "aten::constant_pad_nd.out",
        check_args=_non_negative_padding,
    ),
    # Resampling: Edge keeps the `.vec` overloads, whose output size and scale factors are both
    # optional lists (`SymInt[]?`, `float[]?`): exactly one is given, the other is None.
    # Optimized with align_corners=False, scales = output / input, nearest for integer factors.
    _r("aten.upsample_nearest2d.vec", "aten::upsample_nearest2d.vec_out", provider=_OPT),
    _r("aten.upsample_bilinear2d.vec", "aten::upsample_bilinear2d.vec_out", provider=_OPT),
    # Batch norm that no preprocess fusion absorbed.
    _r(
        "aten._native_batch_norm_legit_no_training.default",
        "aten::_native_batch_norm_legit_no_training.out",
    ),
    # Indexing, selection and masks.
    _r("aten.index.Tensor", "aten::index.Tensor_out", flags=_OPTIONAL_LISTS),
    _r("aten.index_put.default", "aten::index_put.out", flags=_OPTIONAL_LISTS),
    _r("aten.gather.default", "aten::gather.out"),
    # Token embeddings: rows of the table gathered by int64 ids (the kernel checks the ids).
    # Optimized for a float32 table and int64 / int32 ids.
    _r("aten.embedding.default", "aten::embedding.out", provider=_OPT),
    _r("aten.index_select.default", "aten::index_select.out"),
    _r("aten.masked_fill.Scalar", "aten::masked_fill.Scalar_out"),
    _r("aten.where.self", "aten::where.self_out", provider=_OPT),  # bool, float32: Optimized
    _r("aten.logical_and.default", "aten::logical_and.out"),
    _r("aten.logical_or.default", "aten::logical_or.out"),
    _r("aten.logical_not.default", "aten::logical_not.out", provider=_OPT),  # bool: Optimized
    _r("aten.logical_xor.default", "aten::logical_xor.out"),
    *(
        _r(f"aten.bitwise_{kind}.{variant}", f"aten::bitwise_{kind}.{variant}_out")
        for kind in ("and", "or", "xor")
        for variant in ("Tensor", "Scalar")
    ),
    _r("aten.bitwise_not.default", "aten::bitwise_not.out"),
    # Comparisons with a number: Optimized for float32 (our own loops), Reference otherwise.
    *(
        _r(
            f"aten.{cmp}.{kind}",
            f"aten::{cmp}.{kind}_out",
            provider=_OPT if kind == "Scalar" else Provider.REFERENCE,
        )
        for cmp in ("eq", "ne", "lt", "le", "gt", "ge")
        for kind in ("Tensor", "Scalar")
    ),
    # Quantization (PT2E): ExecuTorch's quantized kernels (executorch.kernels.quantized, loaded by
    # loader.load_cpu_backend) with static qparams; preprocess fuses dequantize -> conv/linear ->
    # quantize groups into the int8 ops below, the rest run here (pools, add, mean in float).
    # Per-tensor quantize/dequantize run on the optimized provider's loops (quantize_convert.h,
    # the portable kernels' arithmetic), the portable kernels where it declines.
    _r(
        "quantized_decomposed.quantize_per_tensor.default",
        "quantized_decomposed::quantize_per_tensor.out",
        provider=_OPT,
        check_args=_quantization_scheme,
    ),
    _r(
        "quantized_decomposed.dequantize_per_tensor.default",
        "quantized_decomposed::dequantize_per_tensor.out",
        provider=_OPT,
        check_args=_quantization_scheme,
    ),
    _r(
        "quantized_decomposed.dequantize_per_channel.default",
        "quantized_decomposed::dequantize_per_channel.out",
        check_args=_quantization_scheme,
    ),
    _r(
        "quantized_decomposed.quantize_per_channel.default",
        "quantized_decomposed::quantize_per_channel.out",
        check_args=_quantization_scheme,
    ),
    # The delegate's int8 ops (quantized_ops.py), written only by preprocess: oneDNN int8.
    _r("et_cpu_quant.conv2d.default", "et_cpu_quant::conv2d.out", provider=_OPT),
    _r("et_cpu_quant.linear.default", "et_cpu_quant::linear.out", provider=_OPT),
    _r("et_cpu_quant.max_pool2d.default", "et_cpu_quant::max_pool2d.out", provider=_OPT),
    _r("et_cpu_quant.add.default", "et_cpu_quant::add.out", provider=_OPT),
    # torchao's 8da4w linear and weight-only linear / embedding (backends/cpu/torchao/), written
    # only by preprocess. linear_8da: the Optimized provider's VNNI / AVX2 kernel, else the
    # Reference provider's built-in scalar kernel; linear_wo / embedding_wo: built-in kernels.
    _r("et_cpu_quant.linear_8da.default", "et_cpu_quant::linear_8da.out", provider=_OPT),
    _r("et_cpu_quant.linear_wo.default", "et_cpu_quant::linear_wo.out"),
    _r("et_cpu_quant.embedding_wo.default", "et_cpu_quant::embedding_wo.out"),
    # Rotary embeddings (fuse_rotary.py), written only by preprocess: the Optimized provider's
    # AVX-512 kernel, else the Reference provider's built-in scalar loop.
    _r("et_cpu_quant.rotary.default", "et_cpu_quant::rotary.out", provider=_OPT),
    # RMSNorm (fuse_rms_norm.py), written only by preprocess: the Optimized provider's AVX-512
    # kernel, else the Reference provider's built-in scalar loop.
    _r("et_cpu_quant.rms_norm.default", "et_cpu_quant::rms_norm.out", provider=_OPT),
    # SDPA's softmax with its fully-masked-row guard (fuse_safe_softmax.py), written only by
    # preprocess: the Optimized provider's AVX-512 softmax rows, else the built-in scalar loop.
    _r("et_cpu_quant.safe_softmax.default", "et_cpu_quant::safe_softmax.out", provider=_OPT),
    # Factories.
    _r("aten.arange.default", "aten::arange.out"),
    _r("aten.arange.start_step", "aten::arange.start_out"),
    _r("aten.full.default", "aten::full.out"),
    _r("aten.full_like.default", "aten::full_like.out"),
    _r("aten.scalar_tensor.default", "aten::scalar_tensor.out"),
)

ROUTES: Mapping[str, Route] = MappingProxyType({route.op: route for route in _ROUTE_LIST})


def aten_overload(target: object) -> torch._ops.OpOverload | None:
    """The ATen-level OpOverload behind an FX call target (ATen or Edge op), or None."""
    if isinstance(target, torch._ops.OpOverload):
        return target
    # An EdgeOpOverload wraps the ATen OpOverload in `_op` (an OpOverload's own `_op` is a builtin).
    op = getattr(target, "_op", None)
    return op if isinstance(op, torch._ops.OpOverload) else None


def op_key(target: object) -> str | None:
    """The route-table key of an FX call target, e.g. ``"aten.add.Tensor"``; None for non-ops.

    Built from the schema name and overload name: ``OpOverload.name()`` drops ``.default`` and
    `str()` of an EdgeOpOverload carries its whole schema.
    """
    op = aten_overload(target)
    if op is None:
        return None
    return f"{op._schema.name.replace('::', '.')}.{op._overloadname}"


def route_for(target: object) -> Route | None:
    """The route of an FX call target, or None when the CPU runtime has no route for it."""
    key = op_key(target)
    return None if key is None else ROUTES.get(key)


def ops_to_keep_undecomposed() -> list[torch._ops.OpOverload]:
    """ATen ops that `to_edge` must leave whole for the delegate (see Route.keep_undecomposed)."""
    kept = []
    for route in _ROUTE_LIST:
        if route.keep_undecomposed:
            namespace, name, overload = route.op.split(".")
            kept.append(getattr(getattr(getattr(torch.ops, namespace), name), overload))
    return kept
