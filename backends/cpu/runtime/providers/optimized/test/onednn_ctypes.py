"""ctypes access to the Optimized provider's plans through their C ABI (onednn_c_api.h), for
tests and benchmarks.

The runtime uses the C++ API; this wrapper exists because pybind is not available. Tensors are
torch tensors: inputs must be contiguous float32, outputs are allocated here.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

_ENV_VAR = "ONEDNN_PROVIDER_SO"
_PACKAGE = "backends/cpu/runtime/providers/optimized/test"
_LIBRARY = "libonednn_provider_c.so"

ADD, RELU, CLAMP, SIGMOID, SILU, HARDSWISH, HARDSIGMOID, LEAKY_RELU = range(8)
_OUTPUT_LAYOUTS = {"plain": 0, "channels_last": 1, "best": 2}


@dataclass(frozen=True)
class PostOp:
    """One fused post-op: kind ADD (residual), RELU, CLAMP(lo, hi), SIGMOID, SILU, HARDSWISH,
    HARDSIGMOID or LEAKY_RELU (slope in `lo`)."""

    kind: int
    lo: float = 0.0
    hi: float = 0.0


# Each post-op chain our AVX-512 kernels apply in registers and what torch computes for it (the
# references of the kernel tests).
IN_REGISTER_POST_OPS: dict[str, tuple[list[PostOp], Callable[[torch.Tensor], torch.Tensor]]] = {
    "none": ([], lambda y: y),
    "relu": ([PostOp(RELU)], torch.relu),
    "relu6": ([PostOp(CLAMP, 0.0, 6.0)], lambda y: y.clamp(0.0, 6.0)),
    "hardtanh": ([PostOp(CLAMP, -1.0, 1.0)], lambda y: y.clamp(-1.0, 1.0)),
    "hardswish": ([PostOp(HARDSWISH)], F.hardswish),
    "silu": ([PostOp(SILU)], F.silu),
    "sigmoid": ([PostOp(SIGMOID)], torch.sigmoid),
    "hardsigmoid": ([PostOp(HARDSIGMOID)], F.hardsigmoid),
    "leaky_relu": ([PostOp(LEAKY_RELU, 0.1)], lambda y: F.leaky_relu(y, 0.1)),
    "relu_then_clamp": (
        [PostOp(RELU), PostOp(CLAMP, -1.0, 0.5)],
        lambda y: y.relu().clamp(max=0.5),
    ),
}


def library_path() -> str:
    """The C ABI library: $ONEDNN_PROVIDER_SO (a runfiles path or absolute), else the one Bazel
    put next to this module in the runfiles, else bazel-bin's from the source tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, _LIBRARY), os.path.join("bazel-bin", _PACKAGE, _LIBRARY)]
    path = os.environ.get(_ENV_VAR)
    if path:
        roots = (os.environ.get("RUNFILES_DIR"), os.environ.get("TEST_SRCDIR"), os.getcwd())
        candidates = [os.path.join(r, "et_cpu_plugin", path) for r in roots if r] + [path]
    for candidate in candidates:
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    raise FileNotFoundError(f"{_LIBRARY} not found; looked at {candidates}")


_i64p = ctypes.POINTER(ctypes.c_int64)
_f32p = ctypes.c_void_p


def _load(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    vp, sz, i32, i64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int64
    signatures: dict[str, tuple[object, list[object]]] = {
        "etdnn_last_error": (ctypes.c_char_p, []),
        "etdnn_provider_create": (vp, [i32]),
        "etdnn_provider_create_ex": (vp, [i32, i32, i64]),
        "etdnn_provider_create_sizes_vary": (vp, [i32]),
        "etdnn_provider_work_sharing": (i32, [vp]),
        "etdnn_provider_destroy": (None, [vp]),
        "etdnn_provider_num_threads": (i32, [vp]),
        "etdnn_provider_weights_bytes": (sz, [vp]),
        "etdnn_provider_scratchpad_bytes": (sz, [vp]),
        "etdnn_provider_staging_bytes": (sz, [vp]),
        "etdnn_weight_arena_stats": (None, [ctypes.POINTER(sz), ctypes.POINTER(sz)]),
        "etdnn_provider_isa": (None, [vp, ctypes.c_char_p, sz]),
        "etdnn_conv_prepare": (
            vp,
            [vp, i32, *[_i64p] * 6, vp, vp, vp, vp, vp, i32, vp, i32, i32],
        ),
        "etdnn_linear_prepare": (vp, [vp, i64, i64, i64, i32, vp, vp, vp, vp, vp, i32]),
        "etdnn_matmul_prepare": (vp, [vp, i64, i64, i64, i64, vp, vp, vp, i32]),
        "etdnn_reorder_to_plain_prepare": (vp, [vp, vp]),
        "etdnn_plan_run": (i32, [vp, vp, vp, vp, vp]),
        "etdnn_plan_time": (ctypes.c_double, [vp, vp, vp, vp, vp, i32]),
        "etdnn_plan_output_bytes": (sz, [vp]),
        "etdnn_plan_output_is_plain": (i32, [vp]),
        "etdnn_plan_output_is_channels_last": (i32, [vp]),
        "etdnn_reorder_from_plain_prepare": (vp, [vp, vp]),
        "etdnn_plan_same_output_layout": (i32, [vp, vp]),
        "etdnn_plan_weights_bytes": (sz, [vp]),
        "etdnn_plan_scratchpad_bytes": (sz, [vp]),
        "etdnn_plan_pieces": (sz, [vp]),
        "etdnn_plan_describe": (None, [vp, ctypes.c_char_p, sz]),
        "etdnn_plan_destroy": (None, [vp]),
        "etdnn_has_vector_activation": (i32, [i32]),
        "etdnn_vector_activation": (i32, [i32, vp, vp, sz]),
        "etdnn_pointwise_conv_run": (
            i32,
            [_i64p, vp, vp, vp, vp, vp, i32, vp, vp, i64, i32, ctypes.POINTER(ctypes.c_double)],
        ),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


class ProviderError(RuntimeError):
    """A provider call failed; the message is the provider's."""


def _i64_array(values: Sequence[int]) -> ctypes.Array[ctypes.c_int64]:
    return (ctypes.c_int64 * len(values))(*values)


def _ptr(tensor: torch.Tensor | None) -> int | None:
    if tensor is None:
        return None
    dense = tensor.is_contiguous() or tensor.is_contiguous(memory_format=torch.channels_last)
    if tensor.dtype != torch.float32 or not dense:
        raise ValueError(f"expected a dense float32 tensor, got {tensor.dtype} {tensor.stride()}")
    return int(tensor.data_ptr())


class Plan:
    """A prepared op. Keeps the tensors it was prepared from alive only during prepare."""

    def __init__(self, provider: Provider, handle: int, output_shape: Sequence[int]) -> None:
        self._provider = provider
        self._handle = handle
        self.output_shape = tuple(output_shape)

    def __del__(self) -> None:
        if getattr(self, "_handle", None):
            self._provider.lib.etdnn_plan_destroy(self._handle)

    @property
    def handle(self) -> int:
        return self._handle

    @property
    def output_is_plain(self) -> bool:
        return bool(self._provider.lib.etdnn_plan_output_is_plain(self._handle))

    def same_output_layout(self, other: Plan) -> bool:
        return bool(self._provider.lib.etdnn_plan_same_output_layout(self._handle, other.handle))

    @property
    def output_is_channels_last(self) -> bool:
        return bool(self._provider.lib.etdnn_plan_output_is_channels_last(self._handle))

    @property
    def output_bytes(self) -> int:
        return int(self._provider.lib.etdnn_plan_output_bytes(self._handle))

    @property
    def weights_bytes(self) -> int:
        return int(self._provider.lib.etdnn_plan_weights_bytes(self._handle))

    @property
    def scratchpad_bytes(self) -> int:
        return int(self._provider.lib.etdnn_plan_scratchpad_bytes(self._handle))

    @property
    def pieces(self) -> int:
        """Pieces the work-sharing pool runs (1: one oneDNN call)."""
        return int(self._provider.lib.etdnn_plan_pieces(self._handle))

    def describe(self) -> str:
        buffer = ctypes.create_string_buffer(512)
        self._provider.lib.etdnn_plan_describe(self._handle, buffer, len(buffer))
        return buffer.value.decode()

    def new_output(self) -> torch.Tensor:
        """An output buffer: the logical shape when plain or NHWC, else a flat buffer."""
        if self.output_is_plain:
            return torch.empty(self.output_shape, dtype=torch.float32)
        if self.output_is_channels_last and len(self.output_shape) == 4:
            return torch.empty(self.output_shape, memory_format=torch.channels_last)
        return torch.empty(self.output_bytes // 4, dtype=torch.float32)

    def run_into(
        self,
        out: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor | None = None,
        residual: torch.Tensor | None = None,
    ) -> torch.Tensor:
        status = self._provider.lib.etdnn_plan_run(
            self._handle, _ptr(a), _ptr(b), _ptr(out), _ptr(residual)
        )
        if status != 0:
            raise ProviderError(self._provider.last_error())
        return out

    def time_ns(
        self,
        out: torch.Tensor,
        a: torch.Tensor,
        runs: int,
        b: torch.Tensor | None = None,
        residual: torch.Tensor | None = None,
    ) -> float:
        """The fastest of `runs` back-to-back runs into `out`, in nanoseconds (timed in C)."""
        ns = float(
            self._provider.lib.etdnn_plan_time(
                self._handle, _ptr(a), _ptr(b), _ptr(out), _ptr(residual), runs
            )
        )
        if ns < 0:
            raise ProviderError(self._provider.last_error())
        return ns

    def run(
        self, a: torch.Tensor, b: torch.Tensor | None = None, residual: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.run_into(self.new_output(), a, b, residual)


def _post_arrays(
    post_ops: Sequence[PostOp],
) -> tuple[ctypes.Array[ctypes.c_int], ctypes.Array[ctypes.c_float], ctypes.Array[ctypes.c_float]]:
    kinds = (ctypes.c_int * max(1, len(post_ops)))(*[op.kind for op in post_ops])
    los = (ctypes.c_float * max(1, len(post_ops)))(*[op.lo for op in post_ops])
    his = (ctypes.c_float * max(1, len(post_ops)))(*[op.hi for op in post_ops])
    return kinds, los, his


class Provider:
    """One oneDNN provider (engine, threads, shared scratchpad)."""

    def __init__(
        self,
        num_threads: int = 0,
        path: str | None = None,
        work_sharing: bool = True,
        min_task_flops: int = -1,
        sizes_vary: bool = False,
    ) -> None:
        """`work_sharing` False runs each op on oneDNN's OpenMP team; `min_task_flops` 0 splits
        every op as finely as allowed (-1: the provider's default). `sizes_vary`: a provider of a
        graph whose sizes vary (size-independent plans; the other options their defaults)."""
        self.lib = _load(path or library_path())
        if sizes_vary:
            self._handle = self.lib.etdnn_provider_create_sizes_vary(num_threads)
        else:
            self._handle = self.lib.etdnn_provider_create_ex(
                num_threads, int(work_sharing), min_task_flops
            )
        if not self._handle:
            raise ProviderError(self.last_error())

    def __del__(self) -> None:
        if getattr(self, "_handle", None):
            self.lib.etdnn_provider_destroy(self._handle)

    def last_error(self) -> str:
        return str(self.lib.etdnn_last_error().decode())

    @property
    def num_threads(self) -> int:
        return int(self.lib.etdnn_provider_num_threads(self._handle))

    @property
    def work_sharing(self) -> bool:
        return bool(self.lib.etdnn_provider_work_sharing(self._handle))

    @property
    def weights_bytes(self) -> int:
        return int(self.lib.etdnn_provider_weights_bytes(self._handle))

    @property
    def scratchpad_bytes(self) -> int:
        return int(self.lib.etdnn_provider_scratchpad_bytes(self._handle))

    @property
    def staging_bytes(self) -> int:
        return int(self.lib.etdnn_provider_staging_bytes(self._handle))

    def weight_arena_stats(self) -> tuple[int, int]:
        """The process's weight arena: (bytes of huge-page slabs, bytes of live weights in them)."""
        slabs, blocks = ctypes.c_size_t(), ctypes.c_size_t()
        self.lib.etdnn_weight_arena_stats(ctypes.byref(slabs), ctypes.byref(blocks))
        return int(slabs.value), int(blocks.value)

    def isa(self) -> str:
        buffer = ctypes.create_string_buffer(64)
        self.lib.etdnn_provider_isa(self._handle, buffer, len(buffer))
        return buffer.value.decode()

    def has_vector_activation(self, kind: int) -> bool:
        """Whether the plans run post-op `kind` (SIGMOID, SILU) on their own vector kernel here."""
        return bool(self.lib.etdnn_has_vector_activation(kind))

    def vector_activation(
        self, kind: int, data: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The vector kernel of `kind` over a contiguous float32 tensor, into `out` (a new
        tensor when None; `data` itself for in place)."""
        out = torch.empty_like(data) if out is None else out
        if out.shape != data.shape:
            raise ValueError(f"out shape {tuple(out.shape)} != input shape {tuple(data.shape)}")
        status = self.lib.etdnn_vector_activation(kind, _ptr(data), _ptr(out), data.numel())
        if status != 0:
            raise ProviderError(self.last_error())
        return out

    def pointwise_conv(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        post_ops: Sequence[PostOp] = (),
        runs: int = 1,
    ) -> tuple[torch.Tensor, float] | None:
        """Our float32 1x1 kernel (kernels/pointwise_conv.h, BlockPlan's expand) on the calling
        thread: `x` [pixels, K] channels-last pixels, `weight` [N, K], the output [pixels, N] and
        the fastest of `runs` runs in nanoseconds; None when the kernel does not take it here."""
        pixels, k = x.shape
        n = weight.shape[0]
        weight = weight.contiguous()  # alive through the call
        out = torch.empty(pixels, n)
        kinds, los, his = _post_arrays(post_ops)
        best = ctypes.c_double(-1.0)
        status = self.lib.etdnn_pointwise_conv_run(
            _i64_array([k, n]),
            _ptr(weight),
            _ptr(bias),
            kinds,
            los,
            his,
            len(post_ops),
            _ptr(x),
            _ptr(out),
            pixels,
            runs,
            ctypes.byref(best),
        )
        if status == 2:
            return None
        if status != 0:
            raise ProviderError(self.last_error())
        return out, best.value

    def _check(self, handle: int | None) -> int:
        if not handle:
            raise ProviderError(self.last_error())
        return handle

    def conv(
        self,
        input_shape: Sequence[int],
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        groups: int = 1,
        post_ops: Sequence[PostOp] = (),
        input_from: Plan | None = None,
        input_channels_last: bool = False,
        output: str = "plain",
    ) -> Plan:
        """Prepares torch.nn.functional.conv{1,2,3}d with these arguments (input N, C, *spatial).

        The input is plain, NHWC with `input_channels_last`, or in `input_from`'s output layout;
        `output` is "plain", "channels_last" or "best" (oneDNN's choice).
        """
        batch, channels, *spatial = input_shape
        kernel = list(weight.shape[2:])
        rank = len(spatial)
        named = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation}
        for name, values in named.items():
            if len(values) != rank:
                raise ValueError(f"conv: {name} {list(values)} must have {rank} entries")
        geometry = _i64_array([batch, channels, weight.shape[0], groups])
        kinds, los, his = _post_arrays(post_ops)
        handle = self.lib.etdnn_conv_prepare(
            self._handle,
            rank,
            geometry,
            _i64_array(spatial),
            _i64_array(kernel),
            _i64_array(stride),
            _i64_array(padding),
            _i64_array(dilation),
            _ptr(weight),
            _ptr(bias),
            kinds,
            los,
            his,
            len(post_ops),
            input_from.handle if input_from else None,
            int(input_channels_last),
            _OUTPUT_LAYOUTS[output],
        )
        out_spatial = [
            (size + 2 * pad - dil * (k - 1) - 1) // st + 1
            for size, k, st, pad, dil in zip(
                spatial, kernel, stride, padding, dilation, strict=True
            )
        ]
        return Plan(self, self._check(handle), [batch, weight.shape[0], *out_spatial])

    def linear(
        self,
        rows: int,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        post_ops: Sequence[PostOp] = (),
        weight_is_k_by_n: bool = False,
    ) -> Plan:
        """Prepares linear(x, weight, bias) ([N, K] weight) or addmm(bias, x, weight) ([K, N])."""
        k, n = (weight.shape[0], weight.shape[1]) if weight_is_k_by_n else weight.shape[::-1]
        kinds, los, his = _post_arrays(post_ops)
        handle = self.lib.etdnn_linear_prepare(
            self._handle,
            rows,
            k,
            n,
            int(weight_is_k_by_n),
            _ptr(weight),
            _ptr(bias),
            kinds,
            los,
            his,
            len(post_ops),
        )
        return Plan(self, self._check(handle), [rows, n])

    def matmul(self, batch: int, m: int, k: int, n: int, post_ops: Sequence[PostOp] = ()) -> Plan:
        """Prepares mm (batch 1, 2-D operands) or bmm."""
        kinds, los, his = _post_arrays(post_ops)
        handle = self.lib.etdnn_matmul_prepare(
            self._handle, batch, m, k, n, kinds, los, his, len(post_ops)
        )
        shape = [m, n] if batch == 1 else [batch, m, n]
        return Plan(self, self._check(handle), shape)

    def reorder_from_plain(self, conv: Plan) -> Plan:
        """Prepares the conversion of plain data into `conv`'s output layout."""
        handle = self.lib.etdnn_reorder_from_plain_prepare(self._handle, conv.handle)
        return Plan(self, self._check(handle), conv.output_shape)

    def reorder_to_plain(self, conv: Plan) -> Plan:
        """Prepares the conversion of `conv`'s (blocked) output to plain."""
        handle = self.lib.etdnn_reorder_to_plain_prepare(self._handle, conv.handle)
        return Plan(self, self._check(handle), conv.output_shape)
