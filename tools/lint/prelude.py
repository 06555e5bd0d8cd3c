"""Starlark source of the recording stand-ins the linter evaluates build files against.

Rules, `native.*`, Bazel's `rule()`/`macro()` results and unresolvable loaded symbols become
Starlark functions that hand each registration to Python together with `call_stack()`, so the
linter knows the file, line and macro call chain of every target, exactly as Buck2 evaluates it.
"""

from __future__ import annotations

import json
from typing import Any

from .config import Config, LoadedSymbol, RuleSpec

# Fields of a packed registration record: kind, name, hidden names (comma-separated), outputs as
# far as a label may name them (repr of `outs`/`out`), declared output files (repr of a list;
# empty when the rule's outputs are not known), label-bearing attributes (repr).
RECORD_SEPARATOR = "\x1f"
NO_NAME = "\x00"
OUTPUT_ATTRIBUTE = "\x00output"  # what attr.output() returns, so rule() can tell its outputs
PRELUDE_LABEL = "@target_lint//:prelude.bzl"
# Synthetic file names start with "<" so frames inside them are dropped from call chains.
PRELUDE_FILE = "<target-lint prelude>"

# Bazel's attr module, so rule() definitions in .bzl files evaluate and tell their outputs.
_ATTR_TYPES = [
    "bool", "int", "int_list", "label", "label_keyed_string_dict", "label_list", "output",
    "output_list", "string", "string_dict", "string_keyed_label_dict", "string_list",
    "string_list_dict",
]  # fmt: skip

_CORE = """
def lint__record(kind, hidden, kwargs, outputs = None, implicit = []):
    # One packed string per call: starlark-pyo3 converts every argument of a Python callback
    # separately, and this is the hot path (every registration of every package).
    name = kwargs.get("name")
    name = name if type(name) == "string" else _NONAME
    if outputs == None:
        files = ""
        attributes = {k: v for k, v in kwargs.items() if k not in _NON_LABEL}
    else:
        files = str([kwargs.get(a) for a in outputs] + lint__implicit(name, implicit, kwargs))
        attributes = {k: v for k, v in kwargs.items() if k not in _NON_LABEL and k not in outputs}
    return _SEP.join([
        kind,
        name,
        hidden,
        str(kwargs.get("outs", kwargs.get("out", ""))),
        files,
        str(attributes),
    ])

def lint__implicit(name, templates, kwargs):
    # Bazel's rule(outputs = {...}) templates name attributes ("%{name}.bin", "%{src}.o"); the
    # configuration's only the call's name ("{name}.stripped").
    names = []
    for template in templates:
        if "%{" in template:
            for key, value in kwargs.items():
                if type(value) == "string":
                    template = template.replace("%{" + key + "}", value)
        names.append(template.replace("{name}", name))
    return names

def lint__rule(kind, hidden = [], unless = None, outputs = None, implicit = []):
    hidden_text = ",".join(hidden)
    def rule(*args, **kwargs):
        if unless != None and kwargs.get(unless, True) == False:
            record = lint__record(kind, "", kwargs, outputs, implicit)
        else:
            record = lint__record(kind, hidden_text, kwargs, outputs, implicit)
        # The call stack costs as much as the rest: Python asks for it only when it reports.
        if __lint_register(record):
            __lint_stack(call_stack())
    return rule

def lint__unknown(symbol):
    def unknown(*args, **kwargs):
        # As for rules, Python asks for the call stack only when it would use it.
        if __lint_unknown(lint__record(symbol, "", kwargs)):
            __lint_unknown_stack(call_stack())
    return unknown

def lint__unknown_struct(symbol, members):
    return struct(**{m: lint__unknown(symbol + "." + m) for m in members})

def lint__mode(symbol, mode, kind_arg):
    def wrapper(*args, **kwargs):
        kind = kwargs.pop(kind_arg, None)
        if kind == None and args:
            kind = args[0]
        if kind == None:
            if __lint_unknown(lint__record(symbol, "", kwargs)):
                __lint_unknown_stack(call_stack())
            return None
        __lint_push_mode(mode)
        kind(**kwargs)
        __lint_pop_mode()
    return wrapper

def lint__helper(symbol):
    def helper(*args, **kwargs):
        return kwargs
    return helper

def lint__returning(value):
    def function(*args, **kwargs):
        return value
    return function

def lint__noop(*args, **kwargs):
    return None

def lint__identity(value = None, *args, **kwargs):
    return value

def lint__output_attr(*args, **kwargs):
    return _OUTPUT_ATTR

def rule(implementation = None, test = False, attrs = None, outputs = None, *args, **kwargs):
    declared = [k for k, v in (attrs or {}).items() if v == _OUTPUT_ATTR]
    implicit = list(outputs.values()) if type(outputs) == "dict" else []
    return lint__rule("rule", outputs = declared, implicit = implicit)

def macro(implementation = None, *args, **kwargs):
    return lint__rule("macro")

def provider(*args, **kwargs):
    def make(**fields):
        return struct(**fields)
    return make

def select(conditions, *args, **kwargs):
    if "//conditions:default" in conditions:
        return conditions["//conditions:default"]
    for value in conditions.values():
        return value
    return None

def glob(include = [], exclude = [], *args, **kwargs):
    return __lint_glob(include, exclude)

def package_name():
    return __lint_package_name()

get_base_path = package_name

def repository_name():
    return "@"

def existing_rule(name):
    return __lint_existing_rule(name)

def existing_rules():
    return __lint_existing_rules()

def depset(direct = None, *args, **kwargs):
    return list(direct or [])

def read_config(section = None, key = None, default = None, *args, **kwargs):
    return default

def print(*args, **kwargs):
    return None

def exports_files(srcs = [], visibility = None, licenses = None):
    if __lint_exports(str(srcs)):
        __lint_stack(call_stack())

Label = lint__identity
oncall = lint__noop
package = lint__noop
licenses = lint__noop
repository_rule = lint__noop
aspect = lint__noop
module_extension = lint__noop
tag_class = lint__noop
attr = struct(**{
    t: lint__output_attr if t in ("output", "output_list") else lint__noop
    for t in _ATTR_TYPES
})
"""


_NATIVE_FUNCTIONS = [
    "glob", "package_name", "repository_name", "existing_rule", "existing_rules",
    "exports_files", "package", "licenses",
]  # fmt: skip


def starlark_literal(value: Any) -> str:
    """A TOML value (None, bool, number, string, list, table) as a Starlark expression."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(starlark_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(str(k))}: {starlark_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    raise ValueError(f"no Starlark literal for {value!r}")


def _rule_expr(kind: str, spec: RuleSpec) -> str:
    unless = "None" if spec.unless is None else json.dumps(spec.unless)
    hidden = json.dumps(list(spec.hidden))
    outputs = ""
    if spec.outputs is not None:
        attributes, implicit = list(spec.outputs.attributes), list(spec.outputs.implicit)
        outputs = f", outputs = {json.dumps(attributes)}, implicit = {json.dumps(implicit)}"
    return f"lint__rule({json.dumps(kind)}, hidden = {hidden}, unless = {unless}{outputs})"


def prelude_source(config: Config) -> str:
    """The prelude module: Starlark built-ins of BUILD/.bzl files as recording stand-ins."""
    non_label = {a: True for a in sorted(config.non_label_attributes)}
    lines = [
        f"_NON_LABEL = {json.dumps(non_label).replace('true', 'True')}",
        f"_SEP = {json.dumps(RECORD_SEPARATOR)}",
        f"_NONAME = {json.dumps(NO_NAME)}",
        f"_ATTR_TYPES = {json.dumps(_ATTR_TYPES)}",
        f"_OUTPUT_ATTR = {json.dumps(OUTPUT_ATTRIBUTE)}",
        _CORE,
    ]
    for rule_name in config.native_rules:
        spec = RuleSpec(outputs=config.native_outputs.get(rule_name))
        lines.append(f"{rule_name} = {_rule_expr(rule_name, spec)}")
    members = [f"{r} = {r}" for r in config.native_rules] + [
        f"{f} = {f}" for f in _NATIVE_FUNCTIONS
    ]
    members += ["subpackages = lint__noop", "module_name = lint__noop"]
    members += ["package_relative_label = lint__identity"]
    lines.append("native = struct(" + ", ".join(members) + ")")
    return "\n".join(lines) + "\n"


def stub_expr(symbol: str, spec: LoadedSymbol | None, attributes: list[str], native: bool) -> str:
    """A Starlark expression standing in for `symbol`, loaded from a label outside the tree.

    `attributes` are the `symbol.attr` names the loading file uses, so an unknown symbol used
    as a struct becomes a struct of unknown callables.
    """
    quoted = json.dumps(symbol)
    if spec is None:
        if native:
            return _rule_expr(symbol, RuleSpec())
        if attributes:
            return f"lint__unknown_struct({quoted}, {json.dumps(attributes)})"
        return f"lint__unknown({quoted})"
    if spec.kind == "rule":
        return _rule_expr(symbol, spec.rule)
    if spec.kind == "helper":
        return f"lint__helper({quoted})"
    if spec.kind == "function":
        return f"lint__returning({starlark_literal(spec.value)})"
    if spec.kind == "constant":
        return starlark_literal(spec.value)
    if spec.kind == "mode_wrapper":
        return f"lint__mode({quoted}, {json.dumps(spec.mode)}, {json.dumps(spec.kind_arg)})"
    fields = {m: _rule_expr(f"{symbol}.{m}", s) for m, s in spec.members.items()}
    # Members the file uses that the configuration does not describe stay unknown.
    for attribute in attributes:
        fields.setdefault(attribute, f"lint__unknown({json.dumps(symbol + '.' + attribute)})")
    return "struct(" + ", ".join(f"{k} = {v}" for k, v in sorted(fields.items())) + ")"
