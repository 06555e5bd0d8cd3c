"""ONNX Runtime as a benchmark peer: a PyTorch model exported with `torch.onnx.export` (the dynamo
exporter, its default) and run on ONNX Runtime's CPU execution provider, configured the way a
deployment on this machine would be: all graph optimizations, sequential execution, as many
intra-op threads as torch uses (`torch.get_num_threads()`), one inter-op thread.

Benchmark-only: `onnx`, `onnxscript` and `onnxruntime` are pinned in the lock for tools/bench and
nothing in the plugin imports them. `make_runner` returns a `harness.Runner`; `describe` says
which ONNX Runtime ran and how, for a table's notes; `profile_nodes` times each node of the
session with ONNX Runtime's own profiler, back to back or after time away
(`zoo_bench --profile-away`).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import logging
import os
import statistics
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tools.bench import harness

NAME = "onnxruntime"


def _session_options(threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only
    return options


def export_onnx(model: torch.nn.Module, inputs: Sequence[torch.Tensor], path: str) -> None:
    """Writes `model` traced at `inputs` to `path` as one self-contained ONNX file (weights
    inline). The exporter's progress lines are swallowed; its errors are raised, naming the
    model's class."""
    quiet = io.StringIO()
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)  # e.g. "torchvision is not installed. Skipping ..."
    try:
        with torch.no_grad(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            program = torch.onnx.export(model, tuple(inputs), dynamo=True, external_data=False)
            assert program is not None
            program.save(path, external_data=False)
    except Exception as exc:
        log = quiet.getvalue()[-2000:]
        raise RuntimeError(
            f"torch.onnx.export of {type(model).__name__} failed: {exc}\n{log}"
        ) from exc
    finally:
        exporter_log.setLevel(level)


def _load(
    model: torch.nn.Module, inputs: Sequence[torch.Tensor], options: Any
) -> tuple[Any, dict[str, Any]]:
    """`model` exported and loaded on ONNX Runtime's CPU provider with `options`, and the feed
    of `inputs` by the session's input names (a RuntimeError when their counts differ)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="onnx_peer_") as folder:
        path = os.path.join(folder, "model.onnx")
        export_onnx(model, inputs, path)
        session = ort.InferenceSession(
            path, sess_options=options, providers=["CPUExecutionProvider"]
        )
    names = [entry.name for entry in session.get_inputs()]
    if len(names) != len(inputs):
        raise RuntimeError(
            f"the ONNX model takes {len(names)} inputs, the benchmark has {len(inputs)}"
        )
    feed = {name: tensor.detach().numpy() for name, tensor in zip(names, inputs, strict=True)}
    return session, feed


def make_runner(
    model: torch.nn.Module, inputs: Sequence[torch.Tensor], threads: int | None = None
) -> harness.Runner:
    """Exports `model`, loads it on ONNX Runtime's CPU provider, checks one run against eager
    PyTorch (a wrong peer is no peer: AssertionError naming the largest difference), and returns
    a callable that runs it on `inputs`."""
    session, feed = _load(model, inputs, _session_options(threads or torch.get_num_threads()))
    outputs = session.run(None, feed)
    with torch.no_grad():
        expected = model(*inputs)
    first = expected if isinstance(expected, torch.Tensor) else expected[0]
    got = torch.from_numpy(np.asarray(outputs[0]))
    scale = float(first.abs().max()) or 1.0
    difference = (
        float((got.to(first.dtype) - first).abs().max()) if got.shape == first.shape else None
    )
    if difference is None or difference > 1e-3 * scale:
        raise AssertionError(
            f"ONNX Runtime's output differs from eager: shape {tuple(got.shape)} vs "
            f"{tuple(first.shape)}, max |diff| {difference} (scale {scale:.3g})"
        )
    return lambda: session.run(None, feed)


def profile_nodes(
    model: torch.nn.Module,
    inputs: Sequence[torch.Tensor],
    runs: int,
    away: bool = False,
    threads: int | None = None,
) -> dict[str, Any]:
    """Each node's time in ONNX Runtime's own profiler (`enable_profiling`): the session as
    `make_runner` configures it, 3 untimed calls, then `runs` profiled calls, each right after the
    previous one or (`away`) after `gc.collect()`, the gap before every call in the harness's
    alternating regime. Returns `nodes` in execution order (name, ONNX op type, median us over
    the profiled calls), their sum `total_us` and the median of the profiler's whole `run_us`."""
    if runs < 1:
        raise ValueError(f"profile_nodes needs at least one run, got {runs}")
    with tempfile.TemporaryDirectory(prefix="onnx_profile_") as folder:
        options = _session_options(threads or torch.get_num_threads())
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, "profile")
        session, feed = _load(model, inputs, options)
        for _ in range(3):
            session.run(None, feed)
        for _ in range(runs):
            if away:
                gc.collect()
            session.run(None, feed)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    # Node events are "<node>_kernel_time" (also "_fence_before" / "_fence_after": not kernels).
    suffix = "_kernel_time"
    durations: dict[str, tuple[str, list[float]]] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith(suffix):
            op = str(event.get("args", {}).get("op_name", ""))
            durations.setdefault(name[: -len(suffix)], (op, []))[1].append(float(event["dur"]))
    calls = [
        float(e["dur"]) for e in events if e.get("cat") == "Session" and e["name"] == "model_run"
    ]
    if not durations or len(calls) < runs:
        raise RuntimeError("ONNX Runtime's profile has no node or run events")
    # The last `runs` of each: the untimed calls come first.
    nodes = [
        {"node": node, "op": op, "us": statistics.median(times[-runs:])}
        for node, (op, times) in durations.items()
    ]
    return {
        "runs": runs,
        "away": away,
        "nodes": nodes,
        "total_us": sum(n["us"] for n in nodes),
        "run_us": statistics.median(calls[-runs:]),
    }


def describe(threads: int | None = None) -> str:
    """One line for a table's notes: the version and the session settings."""
    import onnxruntime as ort

    threads = threads or torch.get_num_threads()
    return (
        f"ONNX Runtime {ort.__version__} CPUExecutionProvider, ORT_ENABLE_ALL, sequential, "
        f"{threads} intra-op threads"
    )
