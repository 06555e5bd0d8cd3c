"""Fixture trees stored as txtar files (`-- path --` sections), materialized into a directory.

A tree is kept in one text file instead of real BUILD/BUCK files so that Bazel never loads the
fixtures as packages of this repository and the repo's own lint skips them.
Header lines `expect: RULE PATH:LINE NAME` list every finding the tree must produce.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).with_name("fixtures")
_SECTION_RE = re.compile(r"^-- (.+?) --$", re.MULTILINE)


@dataclass(frozen=True)
class Expected:
    rule: str
    path: str
    line: int
    name: str


@dataclass(frozen=True)
class FixtureTree:
    name: str
    files: dict[str, str]
    expected: frozenset[Expected]

    def write(self, root: Path) -> Path:
        for rel, text in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return root


def parse_txtar(name: str, text: str) -> FixtureTree:
    parts = _SECTION_RE.split(text)
    header, rest = parts[0], parts[1:]
    files = {rest[i]: rest[i + 1].removeprefix("\n") for i in range(0, len(rest), 2)}
    expected = set()
    for line in header.splitlines():
        if line.startswith("expect: "):
            rule, where, finding_name = line.removeprefix("expect: ").split()
            path, _, line_no = where.rpartition(":")
            expected.add(Expected(rule, path, int(line_no), finding_name))
    return FixtureTree(name=name, files=files, expected=frozenset(expected))


def load_fixture(name: str) -> FixtureTree:
    path = FIXTURES / f"{name}.txtar"
    return parse_txtar(name, path.read_text(encoding="utf-8"))


def fixture_names() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.txtar"))
