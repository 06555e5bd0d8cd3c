"""Every fixture tree produces exactly the findings its header expects (and nothing else)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.lint.findings import CHECKS
from tools.lint.linter import lint
from tools.lint.test.fixture_tree import Expected, fixture_names, load_fixture


@pytest.mark.parametrize("name", fixture_names())
def test_fixture_findings(name: str, tmp_path: Path) -> None:
    fixture = load_fixture(name)
    root = fixture.write(tmp_path)
    result = lint([root], None, set(CHECKS), cwd=root)
    assert result.errors == []
    found = {Expected(f.rule, f.location.path, f.location.line, f.name) for f in result.findings}
    assert found == set(fixture.expected)


def test_every_fixture_is_parsed() -> None:
    names = fixture_names()
    assert "regression" in names and len(names) >= 10
    for name in names:
        assert load_fixture(name).files, name
