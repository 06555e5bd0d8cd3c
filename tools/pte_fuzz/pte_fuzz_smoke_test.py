"""Smoke run of the whole-file fuzzer: a few hundred seeded mutations of the three programs, each in
a forked child, and the properties the long run relies on (layout, reproducible cases)."""

import hashlib
import json
import os

import pytest

from tools.lower.errors import LowerError
from tools.lower.pte_layout import LayoutError, read_layout
from tools.lower.runtime_check import load_program
from tools.pte_fuzz import main, mutations
from tools.pte_fuzz.attribution import frames_of, judge
from tools.pte_fuzz.fork_server import prepare_parent, run_case
from tools.pte_fuzz.programs import PROGRAMS

_UPSTREAM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "upstream")
_REGRESSIONS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions")

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
    for record in result["kept"]:
        if record["outcome"]["status"] == "timeout":  # a fork artifact at most
            assert record["fresh_process"] in ("ran", "error"), record
        else:
            assert record["attribution"]["verdict"] in _UPSTREAM, record


# Cases of the long run that crashed in our code (or in a kernel our runtime called with what it
# should have refused) and are clean errors since: (kept file in regressions/, a fragment of the
# CPU delegate's error). The mutated files are kept rather than re-derived from their case ids:
# a case id names bytes of the program as it was lowered then, and any later change to the
# lowering (a route, the payload format) moves them.
_FIXED = [
    # A named-data key that is not UTF-8 reached ET_LOG; the Python log sink aborted the process.
    ("cnn-0-74.pte", ""),
    # Zeros over a convolution's groups: ExecuTorch's kernel divided by them (SIGFPE).
    ("two_delegates-0-558.pte", "must be at least 1"),
    # A damaged shape gave a conv 8388360 input channels: oneDNN's weight reorder read past them.
    ("cnn-0-1643.pte", "do not match input channels 8388360"),
    # A stride of 0: the oneDNN provider's output-size formula divided by it before declining.
    ("cnn-0-9440.pte", "stride[0] is 0, must be at least 1"),
]


@pytest.mark.parametrize(("file", "fragment"), _FIXED)
def test_cases_that_crashed_in_our_code_are_clean_errors_now(
    work: str, file: str, fragment: str
) -> None:
    _, samples = main.load_program(file.split("-")[0], work)
    with open(os.path.join(_REGRESSIONS_DIR, file), "rb") as handle:
        data = handle.read()
    stderr = os.path.join(work, "fixed.stderr")
    outcome = run_case(data, samples, 60.0, stderr)
    assert outcome.status in ("error", "ran"), outcome
    assert fragment in outcome.cpu_error, outcome


def _reproducers() -> list[dict[str, str]]:
    with open(os.path.join(_UPSTREAM_DIR, "manifest.json")) as handle:
        return list(json.load(handle))


@pytest.mark.parametrize("entry", _reproducers(), ids=lambda e: e["file"])
def test_upstream_reproducers_never_crash_in_our_code(work: str, entry: dict[str, str]) -> None:
    """Each kept file crashed inside ExecuTorch in the long run. A wild read may land on mapped
    memory in another process layout, so an error is accepted; a crash must stay upstream."""
    _, samples = main.load_program(entry["program"], work)
    with open(os.path.join(_UPSTREAM_DIR, entry["file"]), "rb") as handle:
        data = handle.read()
    outcome = run_case(data, samples, 60.0, os.path.join(work, "upstream.stderr"))
    assert outcome.status in ("crash", "error"), outcome
    if outcome.status == "crash":
        assert judge(frames_of(outcome.stderr_tail)).verdict in _UPSTREAM, outcome


@pytest.mark.parametrize("entry", _reproducers(), ids=lambda e: e["file"])
def test_behind_the_verifier_upstream_reproducers_are_clean_errors(
    work: str, entry: dict[str, str]
) -> None:
    """--verify: tools/lower's checks (its layout check, then ExecuTorch's program verifier,
    which the pybindings do not apply) refuse each before anything reads the damaged program."""
    _, samples = main.load_program(entry["program"], work)
    with open(os.path.join(_UPSTREAM_DIR, entry["file"]), "rb") as handle:
        data = handle.read()
    stderr = os.path.join(work, "upstream_verified.stderr")
    outcome = run_case(data, samples, 60.0, stderr, verify=True)
    assert (outcome.status, outcome.stage) == ("error", "verify"), outcome


@pytest.mark.parametrize(
    ("text", "what"),
    [(b"CpuBackend", "the id of delegate"), (b"aten::atan", "the name of operator")],
)
def test_the_layout_check_refuses_names_that_are_not_utf8(
    work: str, text: bytes, what: str
) -> None:
    """ExecuTorch logs a backend id or operator it cannot find; the Python bindings' log sink
    aborts the process on bytes that are not UTF-8, and its verifier does not look at them."""
    data, _ = main.load_program("two_delegates", work)
    at = data.index(text, 8)
    damaged = data[:at] + b"\xa6" + data[at + 1 :]
    with pytest.raises(LayoutError, match=f"{what}.* is not UTF-8 text"):
        read_layout(damaged)


def test_the_layout_check_wants_this_executorchs_file_identifier(work: str) -> None:
    data, _ = main.load_program("index", work)
    assert data[4:8] == b"ET12"
    with pytest.raises(LayoutError, match=r"file identifier b'ET\\xc42' at byte 4"):
        read_layout(data[:6] + b"\xc4" + data[7:])


def test_the_lowering_tool_refuses_every_reproducer() -> None:
    """Its layout check catches offsets outside the file; the verifier catches the rest."""
    caught_by_layout = 0
    for entry in _reproducers():
        path = os.path.join(_UPSTREAM_DIR, entry["file"])
        with open(path, "rb") as handle:
            data = handle.read()
        try:
            read_layout(data)
        except LayoutError:
            caught_by_layout += 1
        with pytest.raises(LowerError, match=r"not a loadable \.pte"):
            load_program(path)
    # Those of PteDataMap::get_data, BackendDelegate::Init, get_backend_class,
    # Program::LoadSegment (offsets outside the file) and of the log sink (a bad file identifier).
    assert caught_by_layout >= 5
