"""Keeps the lowering benchmark runnable: its four paths set up and run on a small example."""

from tools.bench import harness, lower_bench


def test_every_path_of_the_lowering_benchmark_runs_on_a_small_example() -> None:
    lower_bench.SIZE = "small"
    (bench,) = [b for b in lower_bench.benchmarks() if b.name == "mlp_bn"]
    result = harness.run_benchmark(bench, harness.Options(repeats=2, warmup=1, memory=False))
    by_name = {v.name: v for v in result.variants}
    assert set(by_name) == {"cpu delegate", "no delegate", "xnnpack", "eager"}
    for variant in result.variants:
        assert variant.error is None, variant.error
        assert variant.median_ms is not None and len(variant.samples_ms) == 2
    assert by_name["cpu delegate"].ratio_to_baseline == 1.0
    assert by_name["cpu delegate"].setup_s is not None and by_name["cpu delegate"].setup_s > 0
