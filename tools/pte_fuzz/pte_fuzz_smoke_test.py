"""Smoke run of the whole-file fuzzer: a few hundred seeded mutations of the three programs, each in
a forked child, and the properties the long run relies on (layout, reproducible cases)."""

import hashlib
import os

import pytest

from tools.pte_fuzz import main, mutations
from tools.pte_fuzz.fork_server import prepare_parent
from tools.pte_fuzz.programs import PROGRAMS
from tools.pte_fuzz.pte_layout import read_layout

# Per program: ~80 cases take ~10-15 s on a loaded 2-core machine.
_CASES = 80
# Crashes in ExecuTorch itself are upstream (kept reproducers in tools/pte_fuzz/upstream/); any
# other verdict fails the test.
_UPSTREAM = ("executorch", "executorch-via-ours")


@pytest.fixture(scope="module")
def work() -> str:
    prepare_parent()
    return os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "pte_fuzz")


@pytest.mark.parametrize("program", PROGRAMS)
def test_layout_finds_each_delegate_payload_and_the_named_data(work: str, program: str) -> None:
    data, _ = main.load_program(program, work)
    layout = read_layout(data)
    delegates = layout.of_kind("delegate")
    assert len(delegates) == (2 if program == "two_delegates" else 1)
    for region in delegates:
        # The CPU delegate's payload is a flatbuffer with file identifier ECP1 at bytes 4..8.
        assert data[region.start + 4 : region.start + 8] == b"ECP1", region
    assert layout.of_kind("named_data"), "the weights are named data"
    assert all(r.end <= len(data) for r in layout.regions)


def test_a_case_id_gives_the_same_bytes_every_time(work: str) -> None:
    data, _ = main.load_program("cnn", work)
    layout = read_layout(data)
    digests = {
        hashlib.sha256(mutations.apply(data, mutations.draw(0, "cnn", 17, layout))).hexdigest()
        for _ in range(3)
    }
    assert len(digests) == 1
    assert mutations.draw(0, "cnn", 17, layout) != mutations.draw(0, "cnn", 18, layout)
    kinds = {mutations.draw(0, "cnn", i, layout)["kind"] for i in range(200)}
    assert kinds == set(mutations.KINDS)


@pytest.mark.parametrize("program", PROGRAMS)
def test_mutated_files_end_in_a_clean_error_or_a_run_never_our_crash(
    work: str, program: str
) -> None:
    result = main.fuzz_program(program, main.FuzzPlan(_CASES), work, main.Progress(quiet=True))
    counts = result["counts"]
    assert sum(counts.values()) == _CASES
    assert counts.get("error", 0) > 0 and counts.get("ran", 0) > 0, counts
    assert counts.get("timeout", 0) == 0, result["kept"]
    for record in result["kept"]:
        assert record["attribution"]["verdict"] in _UPSTREAM, record
