"""Property: on generated packages, findings are exactly the names a run registers twice.

The generator writes calls (direct or through a same-file helper) on both branches of an
`if flag:`/`else:` in two packages; the model counts what the executed branch registers.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tools.lint.findings import CHECKS, DUPLICATE_TARGET
from tools.lint.linter import lint

_call = st.tuples(
    st.sampled_from(["p", "q"]),  # package
    st.sampled_from(["lib", "Lib", "tool", "lib_static"]),  # names, two differing only in case
    st.sampled_from(["always", "then", "else"]),  # where the call sits
    st.booleans(),  # through the helper macro
)


def _targets_bzl(calls: list[tuple[str, str, bool]]) -> str:
    blocks: dict[str, list[str]] = {"always": [], "then": [], "else": []}
    for name, where, via_macro in calls:
        call = f'_via("{name}")' if via_macro else f'native.cc_library(name = "{name}")'
        blocks[where].append(call)
    lines = ["def _via(name):", "    native.cc_library(name = name)", ""]
    lines += ["def define_common_targets(flag):", "    pass"]
    lines += [f"    {c}" for c in blocks["always"]]
    lines += ["    if flag:", "        pass"] + [f"        {c}" for c in blocks["then"]]
    lines += ["    else:", "        pass"] + [f"        {c}" for c in blocks["else"]]
    return "\n".join(lines) + "\n"


@settings(max_examples=40, derandomize=True, deadline=None)
@given(calls=st.lists(_call, max_size=12), flag=st.booleans())
def test_findings_match_the_model(calls: list[tuple[str, str, str, bool]], flag: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "WORKSPACE").write_text("")
        expected = 0
        for package in ("p", "q"):
            mine = [(n, w, m) for p, n, w, m in calls if p == package]
            (root / package).mkdir()
            (root / package / "targets.bzl").write_text(_targets_bzl(mine))
            (root / package / "BUILD.bazel").write_text(
                'load(":targets.bzl", "define_common_targets")\n\n'
                f"define_common_targets(flag = {flag})\n"
            )
            taken = "then" if flag else "else"
            counts = Counter(n for n, w, _ in mine if w in ("always", taken))
            expected += sum(c - 1 for c in counts.values())
        result = lint([root], None, set(CHECKS), cwd=root)
        assert result.errors == []
        assert sum(f.rule == DUPLICATE_TARGET for f in result.findings) == expected
