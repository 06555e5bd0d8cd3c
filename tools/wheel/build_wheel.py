"""Writes the et_cpu_plugin wheel: the delegate's AOT packages and its runtime library, installable
with pip into any environment that has the pinned torch and executorch.

In this repository the packages are top-level (`backends.cpu...`); installed they live under
`et_cpu_plugin.` so they cannot clash with anything else called `backends`. The build rewrites the
absolute imports accordingly and fails if an import of the top-level name is left.

The archive is reproducible: sorted entries, a fixed timestamp, fixed permissions.

Exit codes: 0 written; 1 a source cannot be packaged (import left unrewritten, missing pin); 2 bad
command line.
"""

from __future__ import annotations

import argparse
import ast
import base64
import hashlib
import re
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# 1980-01-01, the earliest time a zip entry can hold: the same bytes on every build.
_EPOCH = (1980, 1, 1, 0, 0, 0)


class WheelError(Exception):
    """A source that cannot be packaged, with what and where."""


@dataclass(frozen=True)
class Entry:
    """One file of the wheel: its path inside the archive and its bytes."""

    path: str
    data: bytes
    executable: bool = False


def rewrite_imports(source: str, old: str, new: str, where: str) -> str:
    """`from old.x import y` / `import old.x as y` -> the same under `new`. Any other import of
    `old` is an error naming the file and line: a bare `import old.x` binds the name `old`, which
    the moved code would then use."""
    from_import = re.compile(rf"^(\s*from\s+){re.escape(old)}(?=[.\s])", re.MULTILINE)
    aliased = re.compile(
        rf"^(\s*import\s+){re.escape(old)}(?=\.[\w.]+\s+as\s+\w+\s*$)", re.MULTILINE
    )
    rewritten = from_import.sub(lambda m: m.group(1) + new, source)
    rewritten = aliased.sub(lambda m: m.group(1) + new, rewritten)
    for node in ast.walk(ast.parse(rewritten, filename=where)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names, line = [node.module], node.lineno
        elif isinstance(node, ast.Import):
            names, line = [alias.name for alias in node.names], node.lineno
        else:
            continue
        for name in names:
            if name == old or name.startswith(old + "."):
                raise WheelError(f"{where}:{line}: import of {name!r} left unrewritten")
    return rewritten


def pinned_requirements(lock_text: str, names: Sequence[str], where: str) -> list[str]:
    """`name==version` for each of `names`, at the version the lock file pins."""
    pins: dict[str, str] = {}
    for line in lock_text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    requirements = []
    for name in names:
        key = name.lower().replace("_", "-")
        if key not in pins:
            raise WheelError(f"{where}: {name} is not pinned")
        requirements.append(f"{name}=={pins[key]}")
    return requirements


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def metadata_entries(
    name: str, version: str, tag: str, requires: Sequence[str], summary: str, readme: str
) -> list[Entry]:
    """The .dist-info files except RECORD."""
    dist_info = f"{name}-{version}.dist-info"
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            f"Name: {name}",
            f"Version: {version}",
            f"Summary: {summary}",
            "Requires-Python: >=3.11",
            *(f"Requires-Dist: {r}" for r in requires),
            "Description-Content-Type: text/markdown",
            "",
            readme,
        ]
    )
    wheel = "\n".join(
        [
            "Wheel-Version: 1.0",
            "Generator: et_cpu_plugin tools/wheel/build_wheel.py",
            "Root-Is-Purelib: false",
            f"Tag: {tag}",
            "",
        ]
    )
    return [
        Entry(f"{dist_info}/METADATA", metadata.encode()),
        Entry(f"{dist_info}/WHEEL", wheel.encode()),
        Entry(f"{dist_info}/top_level.txt", f"{name}\n".encode()),
    ]


def package_init_files(paths: Sequence[str]) -> list[str]:
    """`__init__.py` for every package directory that lacks one: the installed packages are
    regular packages, not namespace packages that any other `backends` directory could join."""
    dirs = {str(Path(p).parent) for p in paths if p.endswith(".py")}
    for d in list(dirs):
        parent = Path(d)
        while str(parent) not in (".", ""):
            dirs.add(str(parent))
            parent = parent.parent
    have = set(paths)
    return sorted(f"{d}/__init__.py" for d in dirs if f"{d}/__init__.py" not in have)


def write_wheel(out: Path, name: str, version: str, entries: Sequence[Entry]) -> None:
    record_path = f"{name}-{version}.dist-info/RECORD"
    ordered = sorted(entries, key=lambda e: e.path)
    paths = [e.path for e in ordered]
    if len(set(paths)) != len(paths):
        raise WheelError(f"{out}: two files at the same path in the wheel")
    record = [f"{e.path},{_record_hash(e.data)},{len(e.data)}" for e in ordered]
    record.append(f"{record_path},,")
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for entry in [*ordered, Entry(record_path, ("\n".join(record) + "\n").encode())]:
            info = zipfile.ZipInfo(entry.path, date_time=_EPOCH)
            info.external_attr = (0o755 if entry.executable else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, entry.data)


def _pair(text: str) -> tuple[Path, str]:
    source, sep, dest = text.partition("=")
    if not sep or not dest:
        raise argparse.ArgumentTypeError(f"expected SOURCE=PATH_IN_WHEEL, got {text!r}")
    return Path(source), dest


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="build_wheel",
        description="Write the et_cpu_plugin wheel (run by //tools/wheel; not a user tool).",
        epilog="exit codes: 0 written, 1 a source cannot be packaged, 2 bad command line",
    )
    parser.add_argument("--out", type=Path, required=True, help="the .whl to write")
    parser.add_argument("--name", required=True, help="distribution and top-level package name")
    parser.add_argument("--version", required=True)
    parser.add_argument("--tag", required=True, help="wheel tag, e.g. py3-none-linux_x86_64")
    parser.add_argument("--summary", required=True)
    parser.add_argument("--readme", type=Path, required=True, help="long description (markdown)")
    parser.add_argument("--lock", type=Path, required=True, help="requirements.lock")
    parser.add_argument(
        "--requires", action="append", default=[], help="a dependency, pinned as in --lock"
    )
    parser.add_argument(
        "--module",
        type=_pair,
        action="append",
        default=[],
        metavar="SRC=DEST",
        help="a Python module; its imports of --rewrite are moved under the package",
    )
    parser.add_argument(
        "--data", type=_pair, action="append", default=[], metavar="SRC=DEST", help="a data file"
    )
    parser.add_argument(
        "--library", type=_pair, action="append", default=[], metavar="SRC=DEST", help="a .so"
    )
    parser.add_argument(
        "--rewrite", action="append", default=[], help="a top-level package moved under --name"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        entries: list[Entry] = []
        for source, dest in args.module:
            text = source.read_text()
            for old in args.rewrite:
                text = rewrite_imports(text, old, f"{args.name}.{old}", str(source))
            entries.append(Entry(dest, text.encode()))
        entries += [Entry(dest, source.read_bytes()) for source, dest in args.data]
        entries += [Entry(dest, source.read_bytes(), True) for source, dest in args.library]
        entries += [Entry(p, b"") for p in package_init_files([e.path for e in entries])]
        requires = pinned_requirements(args.lock.read_text(), args.requires, str(args.lock))
        entries += metadata_entries(
            args.name, args.version, args.tag, requires, args.summary, args.readme.read_text()
        )
        write_wheel(args.out, args.name, args.version, entries)
    except WheelError as error:
        print(f"build_wheel: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
