"""Generates the runtime's table of kernel argument signatures (a C++ .inc file).

Why: an ExecuTorch kernel wrapper indexes its argument stack by position and unboxes each EValue
with an aborting check. A payload whose arguments do not match the kernel's schema (corrupted or
hostile) would crash the process inside `execute`. With the signature of every registered portable
kernel known at build time, `init` rejects such a payload with an error instead.

Aten schemas come from torch's schema registry, custom ones (e.g. `dim_order_ops::`) from the
`func:` entries of the executorch wheel's `kernels/portable/functions.yaml`. One character per
argument, '?' after it when None is also accepted, then ':' and the number of returns:

  T Tensor       W out Tensor (written)   L Tensor[]   O Tensor?[]   V out Tensor[]
  i int/SymInt   I int[]                  f float      F float[]     b bool   B bool[]
  s Scalar       y ScalarType             S str        e MemoryFormat/Layout (an int)
  x anything else (the runtime refuses to bind it)
"""

import argparse
import importlib.util
import os
import re
import sys

import yaml  # type: ignore[import-untyped]


def _split_top_level(text: str) -> list[str]:
    """Splits a schema's argument text at commas outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if text[start:].strip():
        parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


_SCALAR_KINDS = {
    "int": "i",
    "SymInt": "i",
    "float": "f",
    "bool": "b",
    "Scalar": "s",
    "ScalarType": "y",
    "str": "S",
    "MemoryFormat": "e",
    "Layout": "e",
}
_LIST_KINDS = {"int": "I", "SymInt": "I", "float": "F", "bool": "B"}


def argument_kind(type_text: str, is_out: bool) -> str:
    """Maps one schema argument type (e.g. 'Tensor?[]', 'int[2]', 'Tensor(a!)') to its code."""
    base = re.sub(r"\([a-z]!?\)", "", type_text)  # alias annotations
    optional = base.endswith("?")
    base = base.rstrip("?")
    suffix = "?" if optional else ""
    list_match = re.fullmatch(r"(\w+\??)\[\d*\]", base)
    if list_match:
        element = list_match.group(1)
        if element == "Tensor":
            return ("V" if is_out else "L") + suffix
        if element == "Tensor?":
            return "O" + suffix
        return _LIST_KINDS.get(element, "x") + suffix
    if base == "Tensor":
        return ("W" if is_out else "T") + suffix
    return _SCALAR_KINDS.get(base, "x") + suffix


def signature_of(schema: str) -> tuple[str, str]:
    """Returns (qualified name with overload, signature code) of one schema string."""
    match = re.fullmatch(r"\s*([\w:]+(?:\.\w+)?)\((.*)\)\s*->.*", schema, flags=re.DOTALL)
    if match is None:
        raise ValueError(f"unparseable schema: {schema!r}")
    name, arguments = match.groups()
    codes = []
    for argument in _split_top_level(arguments):
        if argument == "*":
            continue
        type_text = argument.split("=", 1)[0].rsplit(" ", 1)[0].strip()
        codes.append(argument_kind(type_text, is_out="!" in type_text))
    return name, "".join(codes)


def _kernel_yamls() -> list[str]:
    """The wheel's portable and quantized (`quantized_decomposed::`) kernel yamls."""
    spec = importlib.util.find_spec("executorch")  # locate the wheel without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("executorch is not installed in this interpreter")
    root = next(iter(spec.submodule_search_locations))
    return [
        os.path.join(root, "kernels", "portable", "functions.yaml"),
        os.path.join(root, "kernels", "quantized", "quantized.yaml"),
    ]


def collect_signatures(yaml_paths: list[str]) -> dict[str, str]:
    """Signatures of every aten schema torch knows, the custom kernels the wheel's yamls add and
    the delegate's own int8 ops (backends/cpu/quantized_ops.py).

    All aten schemas, not only the portable yaml's: the wheel's runtime also registers aten kernels
    from other libraries (e.g. `aten::linear.out`), and a route may name any registered kernel.
    """
    import torch

    from backends.cpu import quantized_ops

    signatures = {}
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::"):
            name, code = signature_of(str(schema))
            signatures[name] = code
    for yaml_path in yaml_paths:
        with open(yaml_path) as handle:
            entries = yaml.safe_load(handle)
        for entry in entries:
            if "func" in entry:
                name, code = signature_of(entry["func"])
                signatures[name] = code
    for ours in quantized_ops.SCHEMAS.values():
        name, code = signature_of(f"{quantized_ops.NAMESPACE}::{ours}")
        signatures[name] = code
    return signatures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="the .inc file to write")
    args = parser.parse_args()
    signatures = collect_signatures(_kernel_yamls())
    lines = ["// Generated by gen_kernel_signatures.py: {kernel name, argument codes}."]
    lines += [f'{{"{name}", "{code}"}},' for name, code in sorted(signatures.items())]
    with open(args.out, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print(f"{len(signatures)} kernel signatures", file=sys.stderr)


if __name__ == "__main__":
    main()
