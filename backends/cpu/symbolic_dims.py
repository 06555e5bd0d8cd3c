"""Symbolic sizes the CPU delegate can run: affine, non-negative functions of bounded symbols.

A program exported with `torch.export.Dim(..., max=N)` carries sizes such as `s0` or `4*s0 + 1`
(sympy expressions of the shape environment). The runtime evaluates each size from the symbols
it reads off the delegate's inputs, so a size must be `offset + sum(coeff * symbol)` with
non-negative integer coefficients (monotone: the upper bounds give the largest tensor, which is
what the arena is planned for) over symbols with a finite upper bound.
"""

import contextlib
import functools
import importlib
import operator
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import sympy  # type: ignore[import-untyped]
import torch

from backends.cpu.routes import op_key

# Ops that compute a size from sizes: inside the delegate they are expressions, not kernels.
_SIZE_OPS = frozenset({operator.mul, operator.add, operator.floordiv})

# Largest upper bound a symbol may have; the runtime rejects larger ones too (payload_reader.cc).
MAX_SYMBOL_BOUND = 2**31 - 1


@dataclass(frozen=True)
class Affine:
    """offset + sum(coeff * symbol) over symbol names (sorted by name)."""

    offset: int
    terms: tuple[tuple[str, int], ...]

    @property
    def is_static(self) -> bool:
        return not self.terms


@dataclass(frozen=True)
class SymbolBounds:
    name: str
    min: int
    max: int


class UnsupportedSize(ValueError):
    """A size the delegate cannot run; the message names the symbol or the expression."""


def symbol_bounds(value: torch.SymInt, symbol: sympy.Symbol) -> SymbolBounds:
    """The range of `symbol` in `value`'s shape environment; raises UnsupportedSize if unbounded."""
    shape_env = value.node.shape_env
    ranges = shape_env.var_to_range.get(symbol) if shape_env is not None else None
    if ranges is None:
        raise UnsupportedSize(f"symbol {symbol} has no known range")
    upper, lower = ranges.upper, ranges.lower
    if not (upper.is_Integer and upper.is_finite):
        raise UnsupportedSize(f"symbol {symbol} has no upper bound")
    if int(upper) > MAX_SYMBOL_BOUND:
        raise UnsupportedSize(f"symbol {symbol}: upper bound {int(upper)} above {MAX_SYMBOL_BOUND}")
    # torch.export keeps a backed size >= 2 while tracing (its 0/1 specialization) even for a
    # Dim(min=1); the traced graph is valid from 1 on, which is what a user exporting min=1 runs.
    low = int(lower) if lower.is_Integer and lower.is_finite else 1
    return SymbolBounds(str(symbol), low if low > 2 else 1, int(upper))


def affine_size(value: int | torch.SymInt) -> tuple[Affine, list[SymbolBounds]]:
    """`value` as an Affine and the bounds of the symbols it uses; raises UnsupportedSize."""
    if isinstance(value, int):
        return Affine(value, ()), []
    expr = sympy.expand(value.node.expr)
    if expr.is_Integer:
        return Affine(int(expr), ()), []
    symbols = sorted(expr.free_symbols, key=str)
    try:
        poly = sympy.Poly(expr, *symbols)
    except sympy.PolynomialError as error:
        raise UnsupportedSize(f"size {expr} is not affine in its symbols") from error
    if poly.total_degree() > 1:
        raise UnsupportedSize(f"size {expr} is not affine in its symbols")
    terms = []
    for symbol in symbols:
        coeff = poly.coeff_monomial(symbol)
        if not coeff.is_Integer or int(coeff) < 0:
            raise UnsupportedSize(f"size {expr}: coefficient {coeff} of {symbol}")
        terms.append((str(symbol), int(coeff)))
    offset = poly.coeff_monomial(1)
    if not offset.is_Integer:
        raise UnsupportedSize(f"size {expr} has a non-integer offset")
    bounds = [symbol_bounds(value, symbol) for symbol in symbols]
    return Affine(int(offset), tuple(terms)), bounds


def value_at(size: Affine, values: dict[str, int]) -> int:
    """`size` with each symbol at `values[name]`."""
    return size.offset + sum(coeff * values[name] for name, coeff in size.terms)


def evaluate(size: Affine, bounds: dict[str, SymbolBounds], *, upper: bool) -> int:
    """`size` with every symbol at its upper (or lower) bound: its largest (smallest) value."""
    return value_at(size, {name: b.max if upper else b.min for name, b in bounds.items()})


def check_value(value: object) -> str | None:
    """None when every size in `value` (a tensor, a SymInt, nested lists) can run, else why not."""
    try:
        _walk(value)
    except UnsupportedSize as error:
        return str(error)
    return None


def _walk(value: object) -> None:
    if isinstance(value, torch.Tensor):
        for dim in value.shape:
            _walk(dim)
    elif isinstance(value, torch.SymInt):
        affine_size(value)
    elif isinstance(value, (torch.SymFloat, torch.SymBool)):
        raise UnsupportedSize(f"symbolic {type(value).__name__} {value}")
    elif isinstance(value, (tuple, list)):
        for item in value:
            _walk(item)


def is_size_node(node: torch.fx.Node) -> bool:
    """Whether `node` computes a symbolic size (`sym_size.int`, arithmetic on sizes)."""
    if node.op != "call_function" or not isinstance(node.meta.get("val"), torch.SymInt):
        return False
    return node.target in _SIZE_OPS or op_key(node.target) == "aten.sym_size.int"


# Where torch keeps the fake (and tracing) implementation of ExecuTorch's delegate call: its fake
# kernel runs `call_delegate_cpu`, looked up in this module at every call.
_DELEGATE_CALL_MODULE = "torch._higher_order_ops.executorch_call_delegate"
_DELEGATE_CALL = "call_delegate_cpu"
_FAKE_KERNEL = "call_delegate_fake_tensor_mode"
_KEEPS_BOUNDS = "_et_cpu_keeps_bounds"  # marks our wrapper (idempotent install)
WORKAROUND = "backends.cpu.symbolic_dims.to_executorch(edge)"


def keep_bounds_when_retraced(backend_id: str) -> str | None:
    """Make `to_executorch()` plan `backend_id`'s delegates for their exported bounds.

    `to_executorch()` re-runs each delegate's original graph on fake tensors (SpecPropPass) in
    the program's shape environment. Torch's fake convolution picks a backend with
    `guard_or_false(batch >= 16)`: on a backed symbol that installs the guard `batch < 16`
    and narrows its range to [.., 15], and memory planning (ConstraintBasedSymShapeEvalPass)
    then sizes every buffer using that symbol, the program's inputs included, for 15. The guards
    of a delegate's graph are torch's kernel choices, not limits of the delegate: its runtime runs
    every size within the exported ranges. So the delegate's fake run is made guard-free for the
    lowered modules of `backend_id` (other backends' delegates run as before).

    Installed once per process; returns None when in place, else why it could not be (torch's
    internals changed): then `to_executorch` (below) is still right.
    """
    try:
        module = importlib.import_module(_DELEGATE_CALL_MODULE)
    except ImportError as error:
        return f"{_DELEGATE_CALL_MODULE} cannot be imported ({error})"
    current = getattr(module, _DELEGATE_CALL, None)
    fake_kernel = getattr(module, _FAKE_KERNEL, None)
    code = getattr(fake_kernel, "__code__", None)
    if (
        not callable(current)
        or code is None
        or _DELEGATE_CALL not in code.co_names
        or getattr(fake_kernel, "__globals__", None) is not vars(module)
    ):
        return f"{_DELEGATE_CALL_MODULE}.{_FAKE_KERNEL} no longer runs {_DELEGATE_CALL}"
    backends: set[str] = getattr(current, _KEEPS_BOUNDS, set())
    if not backends:
        current = _wrap_delegate_call(current, backends)
        setattr(module, _DELEGATE_CALL, current)
    backends.add(backend_id)
    return None


def _wrap_delegate_call(call: Callable[..., Any], backends: set[str]) -> Callable[..., Any]:
    @functools.wraps(call)
    def call_delegate_keeping_bounds(lowered_module: Any, *args: Any) -> Any:
        if getattr(lowered_module, "backend_id", None) not in backends:
            return call(lowered_module, *args)
        with contextlib.ExitStack() as stack:
            for env in {id(env): env for env in _shape_envs(args)}.values():
                stack.enter_context(env.suppress_guards())
            return call(lowered_module, *args)

    setattr(call_delegate_keeping_bounds, _KEEPS_BOUNDS, backends)
    return call_delegate_keeping_bounds


def warn_unkept_bounds(program: Any, reason: str) -> None:
    """Warns, naming each bounded symbol, that `to_executorch()` may plan it short of its bound."""
    bounds: dict[str, SymbolBounds] = {}
    for node in program.graph.nodes:
        if node.op != "placeholder" or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        for dim in node.meta["val"].shape:
            if isinstance(dim, torch.SymInt):
                with contextlib.suppress(UnsupportedSize):
                    for found in affine_size(dim)[1]:
                        bounds[found.name] = found
    for found in bounds.values():
        warnings.warn(
            f"CpuPartitioner: dimension {found.name} is exported with bounds "
            f"[{found.min}, {found.max}], but edge.to_executorch() may plan its buffers for less "
            f"(15 for max=16 when a delegated convolution reads it: torch's fake convolution "
            f"guards batch < 16) because {reason}; call {WORKAROUND} instead of "
            "edge.to_executorch()",
            stacklevel=3,
        )


def narrowed_bounds(program: Any) -> list[tuple[str, int, int]]:
    """(symbol, exported upper bound, current upper bound) of each input symbol whose range in the
    shape environment is narrower than the program's `range_constraints` (the exported contract):
    a guard installed since export (e.g. by a transform pass re-running a convolution on fake
    tensors) that memory planning would follow."""
    found: dict[str, tuple[str, int, int]] = {}
    constraints = getattr(program, "range_constraints", {}) or {}
    for node in program.graph.nodes:
        if node.op != "placeholder" or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        for dim in node.meta["val"].shape:
            if not isinstance(dim, torch.SymInt) or dim.node.shape_env is None:
                continue
            env = dim.node.shape_env
            for symbol in dim.node.expr.free_symbols:
                exported, current = constraints.get(symbol), env.var_to_range.get(symbol)
                if exported is None or current is None:
                    continue
                if not (exported.upper.is_Integer and current.upper.is_Integer):
                    continue
                if int(current.upper) < int(exported.upper):
                    found[str(symbol)] = (str(symbol), int(exported.upper), int(current.upper))
    return list(found.values())


def warn_narrowed_bounds(program: Any) -> None:
    """Warns for each `narrowed_bounds` symbol: to_executorch() would plan it short."""
    for name, exported, current in narrowed_bounds(program):
        warnings.warn(
            f"CpuPartitioner: dimension {name} is exported with max {exported}, but a guard "
            f"installed before partitioning (a pass of to_edge / to_edge_transform_and_lower) "
            f"narrowed it to {current}: to_executorch() will plan the program's buffers for "
            f"{current} and ExecuTorch will refuse larger sizes. Export with Dim(max={current}), "
            "or run that pass under the shape environment's suppress_guards()",
            stacklevel=3,
        )


def to_executorch(edge: Any, config: Any = None) -> Any:
    """`edge.to_executorch(config)` keeping the symbols' ranges as exported.

    With CpuPartitioner's `keep_bounds_when_retraced` in place a plain `edge.to_executorch()`
    does that already; this also covers other delegates in the same program: every guard of the
    re-trace is suppressed. It cannot undo a narrowing installed before (ExecuTorch 1.5's XNNPACK
    guards `batch < 16` while lowering; see `narrowed_bounds`).
    """
    with guards_suppressed(edge.exported_program()):
        return edge.to_executorch(config) if config is not None else edge.to_executorch()


@contextlib.contextmanager
def guards_suppressed(program: Any) -> Iterator[None]:
    """No guard (and no range narrowing) in the shape environments of `program`'s inputs."""
    envs = {
        id(env): env
        for node in program.graph.nodes
        if node.op == "placeholder"
        for env in _shape_envs(node.meta.get("val"))
    }
    with contextlib.ExitStack() as stack:
        for env in envs.values():
            stack.enter_context(env.suppress_guards())
        yield


def _shape_envs(value: object) -> Iterator[Any]:
    if isinstance(value, torch.Tensor):
        for dim in value.shape:
            if isinstance(dim, torch.SymInt) and dim.node.shape_env is not None:
                yield dim.node.shape_env
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _shape_envs(item)
