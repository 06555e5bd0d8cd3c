"""Keeps the KV-cache decoder benchmark runnable: tiny sizes, 2 decode steps, 8da4w, every
engine (ours, XNNPACK, eager) timed, the bandwidth figures derived."""

import json
import os
from pathlib import Path

import pytest

from tools.bench import llm_bench
from tools.bench.llm_models import SIZES


def test_bytes_per_token_counts_int4_weights_and_the_caches() -> None:
    config = SIZES["large"]
    read = llm_bench.bytes_per_token(config, "8da4w")
    # ~0.54B parameters in the linears (the 32000 x 2048 embedding is read one row a token).
    assert 0.45e9 < read["linear_params"] < 0.55e9, read
    assert read["linear_weights"] == read["linear_params"] // 2 + read["linear_params"] // 32 * 4
    float_read = llm_bench.bytes_per_token(config, "none")
    assert float_read["linear_weights"] == 4 * read["linear_params"]
    assert read["kv_cache"] == float_read["kv_cache"] == 2 * 8 * 256 * 2048 * 4


def test_the_bench_runs_tiny(tmp_path: Path) -> None:
    out = tmp_path / "llm.json"
    args = ["--size", "tiny", "--quantize", "8da4w", "--steps", "2", "--prefill", "4"]
    args += ["--repeats", "2", "--warmup", "1", "--bandwidth-mib", "64", "--bandwidth-samples", "5"]
    code = llm_bench.main([*args, "--no-memory", "--quiet", "--json", str(out)])
    assert code == 0
    decode, prefill = json.loads(out.read_text())["benchmarks"]
    assert decode["name"] == "decode/tiny/8da4w" and prefill["name"] == "prefill/tiny/8da4w"
    for bench in (decode, prefill):
        assert [v["name"] for v in bench["variants"]] == ["cpu", "xnnpack", "eager"]
        assert all(v["error"] is None and v["median_ms"] > 0 for v in bench["variants"])
        assert all(e["tokens_per_s"] > 0 for e in bench["details"]["engines"].values())
    details = decode["details"]
    assert details["bandwidth_bytes_per_s"] > 1e8
    probe = details["bandwidth"]
    assert len(probe["samples_bytes_per_s"]) == 5 and probe["buffer_mib"] == 64
    assert probe["threads"] == llm_bench.runtime_threads()
    assert probe["min_bytes_per_s"] <= probe["median_bytes_per_s"] <= probe["max_bytes_per_s"]
    assert probe["median_bytes_per_s"] == details["bandwidth_bytes_per_s"]
    assert "bandwidth" not in prefill["details"]
    limit = details["bandwidth_limit_tokens_per_s"]
    assert limit == details["bandwidth_bytes_per_s"] / details["bytes_per_token"]["total"]
    for figures in details["engines"].values():
        assert figures["fraction_of_bandwidth_limit"] > 0


def test_read_bandwidth_reports_the_median_of_its_samples() -> None:
    probe = llm_bench.read_bandwidth(32, threads=1, samples=5)
    assert len(probe.samples) == 5 and probe.threads == 1 and probe.buffer_mib == 32
    assert all(rate > 1e8 for rate in probe.samples)
    assert probe.median == sorted(probe.samples)[2]
    assert probe.low == min(probe.samples) and probe.high == max(probe.samples)
    assert probe.as_json()["median_bytes_per_s"] == probe.median


def test_runtime_threads_follows_the_affinity_and_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus = len(os.sched_getaffinity(0))
    monkeypatch.delenv("ET_CPU_ONEDNN_THREADS", raising=False)
    assert llm_bench.runtime_threads() == cpus
    monkeypatch.setenv("ET_CPU_ONEDNN_THREADS", "1")
    assert llm_bench.runtime_threads() == 1
    monkeypatch.setenv("ET_CPU_ONEDNN_THREADS", str(cpus + 5))
    assert llm_bench.runtime_threads() == cpus
