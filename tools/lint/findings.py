"""What the linter reports: findings with their location, and the checks' stable ids."""

from __future__ import annotations

from dataclasses import dataclass, field

DUPLICATE_TARGET = "duplicate-target"
UNKNOWN_LOCAL_LABEL = "unknown-local-label"
FILE_TARGET_CONFLICT = "file-target-conflict"
SYNTAX_ERROR = "syntax-error"

RULE_DESCRIPTIONS = {
    DUPLICATE_TARGET: "A target name is registered twice in one package (Buck2 and Bazel fail "
    "at load time).",
    UNKNOWN_LOCAL_LABEL: "A local label (':name') names no target or file in its package.",
    FILE_TARGET_CONFLICT: "A file target (an exports_files entry, a declared output) clashes with "
    "a rule or another file target of its Bazel package, or a rule takes its own output as input "
    "(Bazel fails at load time; Buck2 has no file targets: outputs are sub-targets ':rule[out]', "
    "so BUCK and TARGETS files are not checked).",
    SYNTAX_ERROR: "A build file could not be read or parsed.",
}
CHECKS = (DUPLICATE_TARGET, UNKNOWN_LOCAL_LABEL, FILE_TARGET_CONFLICT)


@dataclass(frozen=True)
class Frame:
    """One Starlark call-stack frame: `function` was running at `path:line`."""

    path: str  # root-relative, '/'-separated
    line: int
    function: str


@dataclass(frozen=True)
class Location:
    path: str  # as shown to the user
    line: int
    column: int


@dataclass(frozen=True)
class Finding:
    rule: str
    message: str
    location: Location
    name: str = ""
    package: str = ""
    first: Location | None = None  # where the name was registered first
    chain: tuple[str, ...] = field(default_factory=tuple)  # "path:line in function" frames

    def sort_key(self) -> tuple[str, int, int, str, str]:
        loc = self.location
        return (loc.path, loc.line, loc.column, self.rule, self.name)
