"""Issue 21: `lower --profile` through the real binary: the table of the slowest ops, the ETDump,
ETRecord and picture beside the .pte, the same in --json, and Inspector reading the files again."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from executorch.devtools import Inspector

from tests.e2e.lower_binary import run_lower_binary

_SVG = "{http://www.w3.org/2000/svg}"


def test_profile_reports_the_slowest_ops_and_writes_the_files(tmp_path: Path) -> None:
    proc = run_lower_binary(
        ["--runs", "0", "--profile", "--profile-runs", "3", "--json", "report.json"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    files = {kind: tmp_path / f"resnet.{kind}" for kind in ("etdp", "etrecord", "profile.svg")}
    for path in files.values():
        assert path.stat().st_size > 0, path

    # The table: header, then the slowest op first; the stem convolution fused its ReLU.
    lines = out.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith("Profile (ETDump; mean of 3")]
    assert lines[start + 1].split() == ["node", "op", "provider", "ms", "share", "fused", "with"]
    rows = [line.split() for line in lines[start + 2 :] if line.startswith("  aten_")]
    assert rows and rows[0][1] == "convolution"
    stem = [r for r in rows if r[0] == "aten_convolution_default"]
    assert stem == [stem[0]] and stem[0][2] == "Optimized" and stem[0][5:] == ["aten_relu_default"]
    times = [float(r[3]) for r in rows]
    assert times == sorted(times, reverse=True)
    assert f"picture: {files['profile.svg']}" in out
    assert f"ETDump: {files['etdp']}  ETRecord: {files['etrecord']}" in out

    # The JSON report has every op: one per kernel call of the delegate, linked to its op.
    profile = json.loads((tmp_path / "report.json").read_text())["profile"]
    ops = profile["ops"]
    assert profile["runs"] == 3 and profile["warmup_runs"] == 1
    # The small resnet's 17 ops: 7 fused into others, its flatten a view of the pooled
    # intermediate (same bytes: never called).
    assert len(ops) == 9
    assert all(op["ms"] > 0 and op["op"] != "-" for op in ops)
    assert 0.5 < sum(op["share"] for op in ops) <= 1.0
    assert profile["files"]["chart"] == str(files["profile.svg"])

    # The picture: one bar per op and one per op kind, widths following the times.
    svg = ET.parse(files["profile.svg"]).getroot()
    bars = [r for r in svg.iter(f"{_SVG}rect") if r.get("class") == "bar"]
    kinds = {op["op"] for op in ops}
    assert len(bars) == len(ops) + len(kinds)
    widths = [float(bar.get("width", "0")) for bar in bars[: len(ops)]]
    assert widths == sorted(widths, reverse=True) and widths[0] > 0
    labels = "".join(svg.itertext())
    assert ops[0]["node"] in labels and "per op kind" in labels

    # Inspector reads the files again, the events linked to the program through the ETRecord.
    inspector = Inspector(etdump_path=str(files["etdp"]), etrecord=str(files["etrecord"]))
    (block,) = [b for b in inspector.event_blocks if b.name == "Execute"]
    delegated = [e for e in block.events if e.is_delegated_op]
    assert len(delegated) == len(ops) and all(e.op_types for e in delegated)
