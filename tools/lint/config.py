"""The linter's configuration: which calls register targets, and how (see default_config.toml).

The semantics of wrappers that live outside the linted tree (ExecuTorch's `runtime.*`,
`fbcode_target`, ...) cannot be evaluated, so a small checked-in table describes them. A
repository overrides or extends the defaults with a TOML file of the same shape.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default_config.toml")
REPO_CONFIG_NAME = ".target-lint.toml"


class ConfigError(Exception):
    """A configuration file that cannot be read or has the wrong shape."""


@dataclass(frozen=True)
class OutputSpec:
    """The files a Bazel rule declares: the strings of `attributes`, and `implicit` names
    ("{name}" is the call's name). Each is a file target of the rule's package."""

    attributes: tuple[str, ...] = ()
    implicit: tuple[str, ...] = ()


@dataclass(frozen=True)
class RuleSpec:
    """A callable that registers `name` (plus `hidden` names unless `unless=False` is passed),
    and declares `outputs` when known (None: which attributes are outputs is not known)."""

    hidden: tuple[str, ...] = ()
    unless: str | None = None
    outputs: OutputSpec | None = None


@dataclass(frozen=True)
class LoadedSymbol:
    """What an unresolvable loaded symbol stands for."""

    kind: str  # "rule" | "struct" | "mode_wrapper" | "helper" | "function" | "constant"
    rule: RuleSpec = RuleSpec()
    members: dict[str, RuleSpec] = field(default_factory=dict)
    mode: str = ""
    kind_arg: str = "_kind"
    value: Any = None  # what a "function" returns / what a "constant" is


@dataclass(frozen=True)
class Config:
    entry_files: tuple[str, ...]
    file_target_entry_files: tuple[str, ...]  # packages that have Bazel's file targets
    extension_suffix: str
    unknown_calls_register: bool
    non_label_attributes: frozenset[str]
    native_rules: tuple[str, ...]
    native_outputs: dict[str, OutputSpec]
    loaded: dict[str, LoadedSymbol]
    repo_mappings: dict[str, str]


_KINDS = ("rule", "struct", "mode_wrapper", "helper", "function", "constant")


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _strings(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ConfigError(f"{where}: expected a list of strings, got {raw!r}")
    return tuple(raw)


def _output_spec(raw: Any, where: str) -> OutputSpec:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {raw!r}")
    unknown = set(raw) - {"attributes", "implicit"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} (attributes, implicit)")
    return OutputSpec(
        attributes=_strings(raw.get("attributes", []), f"{where}.attributes"),
        implicit=_strings(raw.get("implicit", []), f"{where}.implicit"),
    )


def _rule_spec(raw: Any, where: str) -> RuleSpec:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {raw!r}")
    unless = raw.get("unless")
    if unless is not None and not isinstance(unless, str):
        raise ConfigError(f"{where}.unless: expected a string, got {unless!r}")
    outputs = raw.get("outputs")
    return RuleSpec(
        hidden=_strings(raw.get("hidden", []), f"{where}.hidden"),
        unless=unless,
        outputs=None if outputs is None else _output_spec(outputs, f"{where}.outputs"),
    )


def _loaded_symbol(symbol: str, raw: Any) -> LoadedSymbol:
    where = f"loaded.{symbol}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {raw!r}")
    kind = raw.get("kind", "rule")
    if kind not in _KINDS:
        raise ConfigError(f"{where}.kind: expected one of {', '.join(_KINDS)}, got {kind!r}")
    members_raw = raw.get("members", {})
    if not isinstance(members_raw, dict):
        raise ConfigError(f"{where}.members: expected a table, got {members_raw!r}")
    if kind == "mode_wrapper" and not isinstance(raw.get("mode"), str):
        raise ConfigError(f"{where}.mode: a mode_wrapper needs a mode name")
    return LoadedSymbol(
        kind=kind,
        rule=_rule_spec(raw, where) if kind == "rule" else RuleSpec(),
        members={m: _rule_spec(v, f"{where}.members.{m}") for m, v in members_raw.items()},
        mode=str(raw.get("mode", "")),
        kind_arg=str(raw.get("kind_arg", "_kind")),
        value=raw.get("returns", raw.get("value")),
    )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from None


def load_config(extra: Path | None = None) -> Config:
    """The default configuration, with `extra` (a TOML file) merged over it."""
    raw = _read_toml(DEFAULT_CONFIG_PATH)
    if extra is not None:
        raw = _merge(raw, _read_toml(extra))
    try:
        return Config(
            entry_files=tuple(raw["entry_files"]),
            file_target_entry_files=tuple(raw["file_target_entry_files"]),
            extension_suffix=str(raw["extension_suffix"]),
            unknown_calls_register=bool(raw["unknown_calls_register"]),
            non_label_attributes=frozenset(raw["non_label_attributes"]),
            native_rules=tuple(raw["native_rules"]),
            native_outputs={
                str(rule): _output_spec(spec, f"native_outputs.{rule}")
                for rule, spec in raw.get("native_outputs", {}).items()
            },
            loaded={s: _loaded_symbol(s, v) for s, v in raw.get("loaded", {}).items()},
            repo_mappings={str(k): str(v) for k, v in raw.get("repo_mappings", {}).items()},
        )
    except KeyError as e:
        raise ConfigError(f"configuration lacks the key {e.args[0]!r}") from None
