"""Bazel's file targets: a package's exported source files and declared outputs, and their clashes.

In Bazel, files are targets too. `exports_files` entries (source files) and every output a rule
declares (`genrule(outs = ...)`, `attr.output()` attributes, implicit outputs such as
`cc_binary`'s `<name>.stripped`) live in the package's name space with its rules. Bazel 4.2.3
rejects, when it loads the package (each case checked against real Bazel by
test/bazel_agreement_test.py, with the twin that Bazel accepts):
- a rule named like a file target, and a file target named like a rule (either order);
- an output named like another output (of another rule, or twice in one rule) or like an
  exported source file (either order);
- an output that would be a directory of another output (`x` and `x/y`), either order;
- a rule that takes one of its own outputs as an input (`srcs = ["x"], outs = ["x"]`).
It accepts an exports_files entry repeated, with or without visibility, a rule or an output named
like a file on disk that nothing exports, a rule named like a directory of an output, and a rule
whose only output has the rule's own name (`genrule(name = "g", outs = ["g"])`).
Registrations arrive in evaluation order, Bazel's order, so the second of two is the one Bazel
stops at and the one reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .findings import Frame


class Declarer(Protocol):
    """What declares a file target: a rule's registration, or an exports_files call."""

    name: str
    kind: str

    @property
    def frames(self) -> tuple[Frame, ...]: ...


@dataclass(frozen=True)
class FileTarget:
    name: str
    declared_by: Declarer  # the rule whose output it is, or the exports_files call
    source: bool  # an exports_files entry (else an output)

    def describe(self) -> str:
        if self.source:
            return f"exported source file '{self.name}'"
        return f"output '{self.name}' of {self.declared_by.kind} '{self.declared_by.name}'"


@dataclass(frozen=True)
class Conflict:
    """Bazel stops loading the package at `later`; `first` is what it clashed with."""

    name: str
    message: str  # what clashes with what
    later: Declarer
    first: Declarer | None
    why: str = ""  # when it is not plain from the message


@dataclass
class PackageFiles:
    """The file targets of one package as its evaluation declares them, and the conflicts."""

    package: str
    files: dict[str, FileTarget] = field(default_factory=dict)
    directories: dict[str, FileTarget] = field(default_factory=dict)  # "x" of output "x/y"
    conflicts: list[Conflict] = field(default_factory=list)

    def add_rule_name(self, rule: Declarer) -> None:
        """A rule, or a name a rule registers implicitly, joins the package. Call it before
        `add_outputs` of the same rule: a rule may have one output of its own name."""
        clash = self.files.get(rule.name)
        if clash is not None:
            message = f"{rule.kind} '{rule.name}' conflicts with the {clash.describe()}"
            self.conflicts.append(Conflict(rule.name, message, rule, clash.declared_by))

    def add_outputs(
        self,
        rule: Declarer,
        outputs: list[str],
        rules: Mapping[str, Sequence[Declarer]],
        inputs: Iterable[str],
    ) -> None:
        """`rule`'s declared outputs join the package; `rules` are the rules registered before
        it, `inputs` the strings of its label attributes."""
        own: dict[str, FileTarget] = {}
        for output in outputs:
            if output == rule.name:
                continue  # allowed; the name stays the rule's (`bazel query` lists no file)
            target = FileTarget(output, rule, source=False)
            if output in own:
                message = f"{rule.kind} '{rule.name}' declares its output '{output}' twice"
                self.conflicts.append(Conflict(output, message, rule, None))
            elif not self._clashes(target, rules):
                self._check_directories(target, own)
            own.setdefault(output, target)
        for output in sorted(set(own).intersection(self._local_names(inputs))):
            message = f"{rule.kind} '{rule.name}' takes its own output '{output}' as an input"
            self.conflicts.append(Conflict(output, message, rule, None))
        for output, target in own.items():
            self.files.setdefault(output, target)
            for directory in _directories(output):
                self.directories.setdefault(directory, target)

    def add_exports(
        self, call: Declarer, entries: list[str], rules: Mapping[str, Sequence[Declarer]]
    ) -> None:
        """An exports_files call's entries join the package as source files."""
        for entry in entries:
            clash = self.files.get(entry)
            if clash is not None and clash.source:
                continue  # exporting a file again is fine, with or without visibility
            target = FileTarget(entry, call, source=True)
            if not self._clashes(target, rules):
                self.files[entry] = target

    def _clashes(self, target: FileTarget, rules: Mapping[str, Sequence[Declarer]]) -> bool:
        """Records a clash of `target` with a file target or a rule of its name, if any."""
        clash = self.files.get(target.name)
        if clash is not None:
            self._clash(target, f"the {clash.describe()}", clash.declared_by)
            return True
        same = rules.get(target.name)
        if same:
            self._clash(target, f"{same[0].kind} '{target.name}'", same[0])
            return True
        return False

    def _check_directories(self, target: FileTarget, own: Mapping[str, FileTarget]) -> None:
        """An output cannot also be the directory of another output, in either order."""
        holds = self.directories.get(target.name) or next(
            (t for t in own.values() if target.name in _directories(t.name)), None
        )
        if holds is not None:
            why = f"'{target.name}' cannot be a file and a directory"
            self._clash(target, f"the {holds.describe()}", holds.declared_by, why)
            return
        for directory in _directories(target.name):
            holder = own.get(directory) or self.files.get(directory)
            if holder is not None and not holder.source:
                why = f"'{directory}' cannot be a file and a directory"
                self._clash(target, f"the {holder.describe()}", holder.declared_by, why)
                return

    def _clash(self, target: FileTarget, what: str, first: Declarer, why: str = "") -> None:
        message = f"{target.describe()} conflicts with {what}"
        self.conflicts.append(Conflict(target.name, message, target.declared_by, first, why))

    def _local_names(self, labels: Iterable[str]) -> set[str]:
        """The names in this package that labels of a rule's attributes refer to."""
        names = set()
        absolute = f"//{self.package}:"
        for label in labels:
            if label.startswith(":"):
                names.add(label[1:])
            elif label.startswith(absolute):
                names.add(label[len(absolute) :])
            elif ":" not in label and not label.startswith(("/", "@")):
                names.add(label)
        return names


def _directories(path: str) -> list[str]:
    """The directories an output path implies: "a/b/c" -> ["a", "a/b"]."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
