"""Evaluates build files with starlark-pyo3 against recording stand-ins and finds collisions.

Why a real interpreter rather than an abstract one: starlark-pyo3 wraps the Rust Starlark
implementation Buck2 itself uses, so control flow, loops, comprehensions, `%`/`.format()`,
`load()` and macro calls behave exactly as Buck2 evaluates them, and a branch that does not run
registers nothing (mutually exclusive branches are never confused). An abstract interpreter
would re-implement those semantics in Python, and Python's own parser alone is about 3.5x slower
than starlark-pyo3's here, which would break the benchmark's 2 s budget. The price: values the
linter cannot know (symbols loaded from outside the tree, undefined globals) get stand-ins
(`config.py`, `prelude.py`) whose calls return None, so a condition on them takes the `else`
branch; an error that remains (an unknown value used in arithmetic) stops only that package's
evaluation, keeps what it registered so far, and is reported with `--verbose`, never guessed at.
"""

from __future__ import annotations

import os
import re
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import starlark as sl

from .config import Config
from .file_targets import Declarer, PackageFiles
from .findings import DUPLICATE_TARGET, FILE_TARGET_CONFLICT, Finding, Frame, Location
from .globbing import Globber
from .prelude import (
    NO_NAME,
    PRELUDE_FILE,
    PRELUDE_LABEL,
    RECORD_SEPARATOR,
    prelude_source,
    stub_expr,
)
from .workspace import ResolvedLabel, resolve_label

_DIALECT = sl.Dialect.extended()
_DIALECT.enable_f_strings = True  # Buck2 accepts f"{name}_lib"; Bazel files never use them
_GLOBALS = sl.Globals.extended_by(
    [
        sl.LibraryExtension.CallStack,
        sl.LibraryExtension.StructType,
        sl.LibraryExtension.Json,
        sl.LibraryExtension.Map,
        sl.LibraryExtension.Filter,
        sl.LibraryExtension.Partial,
        sl.LibraryExtension.Typing,
        sl.LibraryExtension.EnumType,
        sl.LibraryExtension.RecordType,
    ]
)
_FRAME_RE = re.compile(r"^\s*\* (.+):(\d+), in (.+)$", re.MULTILINE)
_UNDEFINED_RE = re.compile(r"Variable `([A-Za-z_][A-Za-z0-9_]*)` not found")
_STATEMENT_CALL_RE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_.]*\s*\(")
# String literals in a Starlark repr, left to right (so `": [` between two strings never matches).
_STRING_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')
_STRING_OR_COMMENT_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|#[^\n]*')
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Every ASCII character that cannot be part of a name, to a space: `split()` then gives the words
# of a file several times faster than a regular expression over it.
_NON_WORD = str.maketrans({c: " " for c in map(chr, range(128)) if not (c.isalnum() or c == "_")})
_MAX_UNDEFINED_RETRIES = 200
# Public names the prelude defines (its `lint__*` helpers reach files only through stubs).
_DEFINED_RE = re.compile(r"^(?:def\s+)?([A-Za-z][A-Za-z0-9_]*)\s*(?:=|\()", re.MULTILINE)
_STUB_HELPERS = (
    "lint__returning",
    "lint__rule",
    "lint__unknown",
    "lint__unknown_struct",
    "lint__mode",
    "lint__helper",
)


class InputError(Exception):
    """A file that cannot be read or parsed; `message` carries path:line:col."""

    def __init__(self, path: str, line: int, column: int, message: str) -> None:
        super().__init__(f"{path}:{line}:{column}: {message}")
        self.path, self.line, self.column, self.message = path, line, column, message


def _parse_error(display: str, error: Exception) -> InputError:
    """Turns starlark's report ("error: ...\\n --> file:L:C ...") into one located message."""
    text = str(error)
    where = re.search(r"--> .*?:(\d+):(\d+)", text)
    first = text.strip().splitlines()[0] if text.strip() else "parse error"
    first = first.removeprefix("error: ")
    if where:
        return InputError(display, int(where.group(1)), int(where.group(2)), first)
    return InputError(display, 1, 1, first)


@dataclass
class Registration:
    """One target registered into a package. Call stack and attributes stay packed strings
    until a finding needs them: parsing them for every registration would dominate the run."""

    name: str
    kind: str
    mode: str | None
    stack: str  # starlark's call_stack() text
    attributes: str  # repr of the label-bearing keyword arguments
    hidden_of: str | None = None
    assumed: bool = False  # an unresolved call passing name = ...
    _frames: tuple[Frame, ...] | None = None

    @property
    def frames(self) -> tuple[Frame, ...]:
        if self._frames is None:
            self._frames = tuple(
                Frame(path=m.group(1), line=int(m.group(2)), function=m.group(3))
                for m in _FRAME_RE.finditer(self.stack)
                if not m.group(1).startswith("<")
            )
        return self._frames

    @property
    def labels(self) -> list[str]:
        """Label-like strings of its attributes (":x", "//p:x", "@r//p:x")."""
        return [s for s in _STRING_RE.findall(self.attributes) if s[:1] in (":", "/", "@")]


@dataclass
class PackageRun:
    """One entry file's evaluation: the targets it registers into its package."""

    entry: str  # root-relative path of BUILD/BUCK/TARGETS
    package: str  # root-relative directory
    by_name: dict[str, list[Registration]] = field(default_factory=dict)
    outputs: set[str] = field(default_factory=set)
    modes: list[str] = field(default_factory=list)
    duplicates: list[tuple[Registration, Registration]] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)  # why the label check cannot trust it
    detailed: bool = False  # call stacks recorded (a second run, for packages with findings)
    files: PackageFiles | None = None  # its file targets, for a package that has them (Bazel's)


@dataclass
class _Module:
    frozen: Any  # sl.FrozenModule, or None when it failed to evaluate
    in_progress: bool  # being evaluated: loading it again is a cycle


class Evaluator:
    """Evaluates the entry files of one tree; `notes` says what it could not resolve."""

    def __init__(self, root: Path, config: Config) -> None:
        self.root = root
        self._root_prefix = os.path.realpath(root).rstrip("/") + "/"
        self.config = config
        self.notes: list[str] = []
        self._current: PackageRun | None = None
        self._pending: list[Registration] = []  # waiting for their call stack
        self._unresolved: Registration | None = None  # an unresolved call, ditto
        self._modules: dict[str, _Module] = {}  # by root-relative path
        # Stand-in modules by (label, ((exported name, attributes used), ...)).
        self._stubs: dict[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], Any] = {}
        self._texts: dict[str, str] = {}  # file texts read so far, by root-relative path
        self._split: dict[str, list[str]] = {}  # their lines, split when a finding needs them
        # load() labels resolved per package: (label, package) -> (file or None, is a file)
        self._resolved: dict[tuple[str, str], tuple[ResolvedLabel | None, bool]] = {}
        self._native = set(config.native_rules)
        self._root_dir = str(root)
        self._globber = Globber(config.entry_files)
        prelude = sl.Module()
        prelude.add_callable("__lint_register", self._register)
        prelude.add_callable("__lint_unknown", self._unknown_call)
        prelude.add_callable("__lint_exports", self._exports)
        prelude.add_callable("__lint_unknown_stack", self._unknown_stack)
        prelude.add_callable("__lint_stack", self._stack)
        prelude.add_callable("__lint_push_mode", self._push_mode)
        prelude.add_callable("__lint_pop_mode", self._pop_mode)
        prelude.add_callable("__lint_glob", self._glob)
        prelude.add_callable("__lint_package_name", self._package_name)
        prelude.add_callable("__lint_existing_rule", self._existing_rule)
        prelude.add_callable("__lint_existing_rules", self._existing_rules)
        source = prelude_source(config)
        sl.eval(prelude, sl.parse(PRELUDE_FILE, source, _DIALECT), _GLOBALS)
        self._prelude = prelude.freeze()
        # A module gets the prelude's names it mentions, as Bazel's and Buck's built-ins are
        # there in every file (a file may rebind a loaded name: no conflict with its own names).
        # Rules are globals of build files only; a .bzl file reaches them as `native.<rule>`.
        # Each name a load() binds costs time, so only the names a file mentions are bound,
        # by one parsed load statement per set of names.
        defined = {n for n in _DEFINED_RE.findall(source) if not n.startswith("lint__")}
        self._build_names = frozenset(defined)
        self._extension_names = frozenset(defined - self._native)
        self._prelude_loads: dict[frozenset[str], Any] = {}

    # ---- public -------------------------------------------------------------------------
    def evaluate_entry(self, path: Path, detailed: bool = False) -> PackageRun:
        """Evaluates one BUILD/BUCK/TARGETS file. Without `detailed`, registrations carry no
        call stack (fast); evaluate again with it to report where findings come from."""
        rel = self.rel(path)
        package = rel.rpartition("/")[0]
        run = PackageRun(entry=rel, package=package, detailed=detailed)
        if path.name in self.config.file_target_entry_files:
            run.files = PackageFiles(package)
        self._current = run
        try:
            self._evaluate(path, package)
        except (_EvalFailure, sl.StarlarkError) as e:
            run.incomplete.append(_short(e))
            self.notes.append(f"{rel}: evaluation stopped: {_short(e)}")
        finally:
            self._current = None
        return run

    def check_syntax(self, path: Path) -> None:
        """Parses a file no entry file reached, so syntax errors are reported anyway."""
        if self.rel(path) in self._modules:
            return  # already parsed (and evaluated) because an entry file loaded it
        rel = self.rel(path)
        self._parse(path, rel, self._read(path, rel))

    def rel(self, path: Path) -> str:
        """Root-relative '/'-separated path (string operations: this runs for every file)."""
        text = os.path.abspath(path)
        if text.startswith(self._root_prefix):
            return text[len(self._root_prefix) :]
        resolved = os.path.realpath(text)
        if resolved.startswith(self._root_prefix):
            return resolved[len(self._root_prefix) :]
        return text

    def column_of(self, frame: Frame) -> int:
        """1-based column of the first non-blank character of the frame's line."""
        lines = self._lines(frame.path)
        if 0 < frame.line <= len(lines):
            text = lines[frame.line - 1]
            return len(text) - len(text.lstrip()) + 1
        return 1

    def suppressed(self, path: str, line: int, rule: str) -> bool:
        """`# target-lint: disable=RULE[,RULE]` on the line or the line above silences it."""
        for text in (self.line_text(path, line), self.line_text(path, line - 1)):
            marker = text.find(SUPPRESS_MARKER)
            if marker >= 0:
                ids = text[marker + len(SUPPRESS_MARKER) :].split()[0].split(",")
                if rule in ids:
                    return True
        return False

    def line_text(self, path: str, line: int) -> str:
        lines = self._lines(path)
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def _lines(self, path: str) -> list[str]:
        lines = self._split.get(path)
        if lines is None:
            text = self._texts.get(path)
            if text is None:
                try:
                    text = (self.root / path).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    text = ""
            lines = self._split[path] = text.splitlines()
        return lines

    # ---- file evaluation ----------------------------------------------------------------
    def _read(self, path: Path, rel: str) -> str:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(rel, 1, 1, f"cannot read: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise InputError(rel, 1, 1, f"not UTF-8: {e.reason} at byte {e.start}") from None
        self._texts[rel] = text
        self._split.pop(rel, None)  # --fix may have changed the file since
        return text

    def _parse(self, path: Path, rel: str, text: str) -> Any:
        try:
            return sl.parse(rel, text, _DIALECT)
        except sl.StarlarkError as e:
            raise _parse_error(rel, e) from None

    def _evaluate(self, path: Path, package: str) -> Any:
        """Evaluates one file into a new module and returns that module (not frozen)."""
        module = sl.Module()
        rel = self.rel(path)
        text = self._read(path, rel)
        ast = self._parse(path, rel, text)
        uses = _AttributeUses(text)
        loaded = self._resolve_loads(ast, uses, rel, package)
        loaded[PRELUDE_LABEL] = self._prelude
        loader = sl.FileLoader(loaded.__getitem__)
        entry = path.name in self.config.entry_files
        prelude_names = self._prelude_load(text, entry)
        undefined: list[str] = []
        for _ in range(_MAX_UNDEFINED_RETRIES):
            if undefined:  # a retry: start from a clean module, the failed one is half-filled
                module = sl.Module()
                ast = self._parse(path, rel, text)
                loaded[_UNDEFINED_LABEL] = self._stub_module(
                    _UNDEFINED_LABEL, {u: u for u in undefined}, uses
                )
                inject = _load_statement(_UNDEFINED_LABEL, undefined)
                sl.eval(module, inject, _GLOBALS, loader)
            if prelude_names is not None:
                sl.eval(module, prelude_names, _GLOBALS, loader)
            try:
                sl.eval(module, ast, _GLOBALS, loader)
                return module
            except sl.StarlarkError as e:
                missing = _UNDEFINED_RE.search(str(e))
                if missing and missing.group(1) not in undefined and not self._started(e):
                    undefined.append(missing.group(1))
                    self._note_incomplete(f"{rel}: undefined global {missing.group(1)!r}")
                    continue
                raise _EvalFailure(_short(e)) from None
        raise _EvalFailure(f"{rel}: too many undefined globals")

    def _prelude_load(self, text: str, entry: bool) -> Any:
        """The load statement binding the prelude names `text` mentions (as whole words), or
        None when it mentions none."""
        available = self._build_names if entry else self._extension_names
        names = available.intersection(text.translate(_NON_WORD).split())
        if not names:
            return None
        statement = self._prelude_loads.get(names)
        if statement is None:
            statement = self._prelude_loads[names] = _load_statement(PRELUDE_LABEL, names)
        return statement

    @staticmethod
    def _started(error: Exception) -> bool:
        """True when the error was raised while running (a traceback), not while compiling."""
        return "Traceback" in str(error)

    def _resolve_loads(
        self, ast: Any, uses: _AttributeUses, rel: str, package: str
    ) -> dict[str, Any]:
        wanted: dict[str, dict[str, str]] = {}
        for load in ast.loads():  # one label may be loaded by several statements
            wanted.setdefault(load.module_id, {}).update(load.symbols)
        loaded: dict[str, Any] = {}
        for label, symbols in wanted.items():
            target, is_file = self._resolve(label, package)
            frozen = None
            if is_file and target is not None:
                frozen = self._load_module(target.path, target.package, rel, label)
            if frozen is None:
                frozen = self._stub_module(label, symbols, uses)
                if target is None:
                    missing = ""
                elif is_file:
                    missing = f" ({self.rel(target.path)} did not evaluate)"
                else:
                    missing = f" (no file {self.rel(target.path)})"
                self.notes.append(
                    f"{rel}: load({label!r}) not resolved in the tree{missing}; stand-ins for "
                    + ", ".join(sorted(set(symbols.values())))
                )
            loaded[label] = frozen
        return loaded

    def _resolve(self, label: str, package: str) -> tuple[ResolvedLabel | None, bool]:
        """The file a load() label names and whether it exists (cached: most labels repeat)."""
        # Only relative labels (":f.bzl", "f.bzl") depend on the loading package.
        key = (label, "" if label.startswith(("//", "@")) or "//" in label else package)
        found = self._resolved.get(key)
        if found is None:
            target = resolve_label(label, self.root, package, self.config.repo_mappings)
            found = (target, target is not None and os.path.isfile(target.path))
            self._resolved[key] = found
        return found

    def _load_module(self, path: Path, package: str, by: str, label: str) -> Any:
        key = self.rel(path)
        cached = self._modules.get(key)
        if cached is not None:
            if cached.in_progress:
                self.notes.append(f"{by}: load({label!r}) is a load cycle")
                self._note_incomplete(f"{by}: load cycle through {label}")
            elif cached.frozen is None:
                self._note_incomplete(f"{by}: {label} did not evaluate")
            return cached.frozen
        self._modules[key] = _Module(frozen=None, in_progress=True)
        try:
            frozen = self._evaluate(path, package).freeze()
        except (_EvalFailure, sl.StarlarkError) as e:
            self.notes.append(f"{self.rel(path)}: evaluation stopped: {_short(e)}")
            self._note_incomplete(f"{self.rel(path)} did not evaluate")
            frozen = None
        except InputError:
            del self._modules[key]
            raise
        self._modules[key] = _Module(frozen=frozen, in_progress=False)
        return frozen

    def _stub_module(self, label: str, symbols: dict[str, str], uses: _AttributeUses) -> Any:
        """A module exporting stand-ins for `symbols` (local name -> exported name)."""
        described: list[tuple[str, tuple[str, ...]]] = []  # (exported, attributes used)
        for local, exported in sorted(symbols.items(), key=lambda item: item[1]):
            spec = self.config.loaded.get(exported)
            if spec is None and exported not in self._native:  # a struct if the file says so
                described.append((exported, uses.of(local)))
            elif spec is not None and spec.kind == "struct":  # members beyond the table
                described.append((exported, uses.of(local, spec.members)))
            else:
                described.append((exported, ()))
        key = (label, tuple(described))
        frozen = self._stubs.get(key)
        if frozen is None:
            lines = []
            for exported, attributes in described:
                spec = self.config.loaded.get(exported)
                expr = stub_expr(exported, spec, list(attributes), exported in self._native)
                lines.append(f"{exported} = {expr}")
            names = ", ".join(f'"{n}"' for n in _STUB_HELPERS)
            source = f'load("{PRELUDE_LABEL}", {names})\n' + "\n".join(lines) + "\n"
            module = sl.Module()
            loader = sl.FileLoader(lambda _label: self._prelude)
            ast = sl.parse(f"<target-lint stub {label}>", source, _DIALECT)
            sl.eval(module, ast, _GLOBALS, loader)
            frozen = self._stubs[key] = module.freeze()
        return frozen

    # ---- callbacks from Starlark --------------------------------------------------------
    def site(self, package: str, registration: Declarer) -> Frame:
        """The deepest frame in the package's own directory: the call a person would edit."""
        frames = registration.frames
        for frame in reversed(frames):
            if frame.path.rpartition("/")[0] == package:
                return frame
        return frames[0] if frames else Frame(package + "/BUILD", 1, "<module>")

    def _diverging_sites(
        self, package: str, first: Registration, dup: Registration
    ) -> tuple[Frame, Frame]:
        """Where the two call chains part: the two calls a person compares (two blocks in a
        targets.bzl, two calls of one helper). Identical chains (a loop) fall back to `site`."""
        for a, b in zip(first.frames, dup.frames, strict=False):
            if (a.path, a.line) != (b.path, b.line):
                return a, b
        return self.site(package, first), self.site(package, dup)

    def _add(self, run: PackageRun, registration: Registration) -> None:
        same = run.by_name.get(registration.name)
        if same is None:
            run.by_name[registration.name] = [registration]
            return
        for earlier in same:
            if None in (earlier.mode, registration.mode) or earlier.mode == registration.mode:
                run.duplicates.append((earlier, registration))
                break
        same.append(registration)

    def _register(self, record: str) -> bool:
        """Records a registration; True asks the stand-in for its call stack (see `_stack`)."""
        run = self._current
        if run is None:
            return False
        kind, name, hidden, outputs, files, attributes = record.split(RECORD_SEPARATOR, 5)
        mode = run.modes[-1] if run.modes else None
        if name == NO_NAME:
            self._pending = [Registration("", kind, mode, "", attributes)]
            return True
        registration = Registration(name, kind, mode, "", attributes)
        package_files = run.files
        if package_files is not None:
            package_files.add_rule_name(registration)
            if len(files) > 2:  # not "" (outputs unknown) nor "[]"
                inputs = _STRING_RE.findall(attributes)
                declared = _STRING_RE.findall(files)
                package_files.add_outputs(registration, declared, run.by_name, inputs)
        self._add(run, registration)
        self._pending = [registration]
        if hidden:
            for pattern in hidden.split(","):
                hidden_name = pattern.replace("{name}", name)
                extra = Registration(hidden_name, kind, mode, "", "", hidden_of=name)
                if package_files is not None:
                    package_files.add_rule_name(extra)
                self._add(run, extra)
                self._pending.append(extra)
        if outputs:
            run.outputs.update(_STRING_RE.findall(outputs))
        return run.detailed

    def _exports(self, entries: str) -> bool:
        """Records an exports_files call; True asks for its call stack, as `_register`."""
        run = self._current
        if run is None:
            return False
        call = Registration(EXPORTS_FILES, EXPORTS_FILES, None, "", "")
        self._pending = [call]
        if run.files is not None:
            run.files.add_exports(call, _STRING_RE.findall(entries), run.by_name)
        return run.detailed

    def _stack(self, stack: str) -> None:
        run = self._current
        for registration in self._pending:
            registration.stack = stack
            if not registration.name and run is not None:
                site = self.site(run.package, registration)
                why = f"{site.path}:{site.line}: {registration.kind} call without a string name"
                self._note_incomplete(why)
        self._pending = []

    def _unknown_call(self, record: str) -> bool:
        """Records a call of an unresolved symbol; True asks for its call stack, which only a
        detailed run or the package's first reason to distrust its evaluation needs."""
        run = self._current
        if run is None:
            return False
        symbol, name, _, _, _, attributes = record.split(RECORD_SEPARATOR, 5)
        self._pending = []
        mode = run.modes[-1] if run.modes else None
        reg = Registration(name, symbol, mode, "", attributes, assumed=True)
        self._unresolved = reg
        if name != NO_NAME and self.config.unknown_calls_register:
            self._add(run, reg)
        # Already distrusted: the reason a person reads is the first one.
        return run.detailed or not run.incomplete

    def _unknown_stack(self, stack: str) -> None:
        reg, self._unresolved = self._unresolved, None
        run = self._current
        if reg is None or run is None:
            return
        reg.stack = stack
        frames = reg.frames
        caller = frames[-1] if frames else Frame(run.entry, 1, "<module>")
        if reg.name == NO_NAME and not _STATEMENT_CALL_RE.match(
            self.line_text(caller.path, caller.line)
        ):
            # A bare statement call might be a macro registering targets we cannot see; a call
            # whose value is used (`if is_fbcode():`, `x = f()`) only computes something.
            return
        self._note_incomplete(f"{caller.path}:{caller.line}: call of unresolved {reg.kind!r}")

    def _note_incomplete(self, why: str) -> None:
        if self._current is not None and why not in self._current.incomplete:
            self._current.incomplete.append(why)

    def _push_mode(self, mode: str) -> None:
        if self._current is not None:
            self._current.modes.append(mode)

    def _pop_mode(self) -> None:
        if self._current is not None and self._current.modes:
            self._current.modes.pop()

    def _glob(self, include: list[str], exclude: list[str]) -> list[str]:
        run = self._current
        if run is None:
            return []
        return self._globber.glob(os.path.join(self._root_dir, run.package), include, exclude)

    def _package_name(self) -> str:
        return self._current.package if self._current else ""

    def _existing_rule(self, name: str) -> dict[str, str] | None:
        run = self._current
        if run is None or name not in run.by_name:
            return None
        return {"name": name, "kind": run.by_name[name][0].kind}

    def _existing_rules(self) -> dict[str, dict[str, str]]:
        run = self._current
        if run is None:
            return {}
        return {n: {"name": n, "kind": regs[0].kind} for n, regs in run.by_name.items()}

    # ---- results ------------------------------------------------------------------------
    def file_target_findings(self, run: PackageRun, display: Any) -> list[Finding]:
        """Findings for the file-target conflicts of `run` (see file_targets.py)."""
        findings = []
        pkg = "//" + run.package
        for conflict in run.files.conflicts if run.files is not None else []:
            site = self.site(run.package, conflict.later)
            if self.suppressed(site.path, site.line, FILE_TARGET_CONFLICT):
                continue
            message = f"{conflict.message} in package '{pkg}'"
            if conflict.why:
                message += f": {conflict.why}"
            first = None
            if conflict.first is not None:
                first = self._location(self.site(run.package, conflict.first), display)
                message += f" (first declared at {first.path}:{first.line})"
            findings.append(
                Finding(
                    rule=FILE_TARGET_CONFLICT,
                    message=message,
                    location=self._location(site, display),
                    name=conflict.name,
                    package=pkg,
                    first=first,
                )
            )
        return findings

    def _location(self, frame: Frame, display: Any) -> Location:
        """Where a finding points: the frame's line, at its first non-blank column."""
        return Location(display(frame.path), frame.line, self.column_of(frame))

    def duplicate_findings(self, run: PackageRun, display: Any) -> list[Finding]:
        """Findings for every collision in `run`; `display` maps root-relative paths for output."""
        findings = []
        for first, dup in run.duplicates:
            first_site, site = self._diverging_sites(run.package, first, dup)
            if self.suppressed(site.path, site.line, DUPLICATE_TARGET):
                continue
            shown = "'" + dup.name + "'"
            if dup.hidden_of is not None:
                shown += f" (registered implicitly by {dup.kind}(name = '{dup.hidden_of}'))"
            elif first.hidden_of is not None:
                shown += (
                    f" (also registered implicitly by {first.kind}(name = '{first.hidden_of}'))"
                )
            pkg = "//" + run.package
            message = (
                f"duplicate target {shown} in package '{pkg}' "
                f"(first registered at {display(first_site.path)}:{first_site.line})"
            )
            chain = tuple(f"{display(f.path)}:{f.line} in {f.function}" for f in dup.frames)
            if len(dup.frames) > 1:
                message += "; call chain: " + " -> ".join(chain)
            findings.append(
                Finding(
                    rule=DUPLICATE_TARGET,
                    message=message,
                    location=self._location(site, display),
                    name=dup.name,
                    package=pkg,
                    first=self._location(first_site, display),
                    chain=chain,
                )
            )
        return findings


def _load_statement(label: str, names: Iterable[str]) -> Any:
    """The parsed `load(label, names...)` that gives a module names it does not load itself."""
    symbols = ", ".join(f'"{n}"' for n in sorted(names))
    return sl.parse("<target-lint inject>", f'load("{label}", {symbols})\n', _DIALECT)


class _AttributeUses:
    """Which `name.attribute` uses a file's code makes (strings and comments are no use)."""

    def __init__(self, text: str) -> None:
        self._text = text

    def of(self, name: str, known: Container[str] = ()) -> tuple[str, ...]:
        """The attributes of `name` the file uses, except `known` ones (which need no look)."""
        text, key = self._text, name + "."
        found: set[str] = set()
        start = text.find(key)
        while start >= 0:
            end = start + len(key)
            attribute = _IDENT_RE.match(text, end)
            before = text[start - 1] if start else " "
            # `x.name.y`, `other_name.y` and `"//p:name.bzl"` are no use of `name`.
            if attribute and not (before.isalnum() or before in "_.:/"):
                word = attribute.group()
                if word not in known and word not in found and self._in_code(start, word):
                    found.add(word)
            start = text.find(key, end)
        return tuple(sorted(found))

    def _in_code(self, start: int, attribute: str) -> bool:
        """Whether the use at `start` survives blanking its line's strings and comments."""
        line_start = self._text.rfind("\n", 0, start) + 1
        line_end = self._text.find("\n", start)
        line = self._text[line_start : line_end if line_end >= 0 else len(self._text)]
        code = _STRING_OR_COMMENT_RE.sub(lambda m: " " * len(m.group()), line)
        column = start - line_start
        return code[column : column + 1] == line[column : column + 1]


class _EvalFailure(Exception):
    """Evaluation of a file stopped (a run-time error); its registrations so far still count."""


_UNDEFINED_LABEL = "@target_lint//:undefined.bzl"
EXPORTS_FILES = "exports_files"  # kind and name of an exports_files call's registration
SUPPRESS_MARKER = "target-lint: disable="


def _short(error: Exception) -> str:
    text = str(error).strip()
    lines = [ln for ln in text.splitlines() if ln.startswith("error:")]
    where = re.search(r"--> (.*?:\d+:\d+)", text)
    head = lines[0].removeprefix("error: ") if lines else text.splitlines()[-1]
    return f"{head} (at {where.group(1)})" if where else head
