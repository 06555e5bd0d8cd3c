"""The linted tree: its root, its build files, and how load() labels map onto its files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT_MARKERS = ("WORKSPACE", "WORKSPACE.bazel", "MODULE.bazel", ".buckconfig", ".buckroot")
# Directories no build system reads: VCS data, Bazel's output symlinks, caches.
_SKIPPED_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}


def find_root(path: Path) -> Path:
    """The nearest ancestor holding a workspace marker, else the directory given itself."""
    start = path if path.is_dir() else path.parent
    for candidate in (start, *start.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
    return start


def _ignored_dirs(root: Path) -> set[Path]:
    """Directories listed in the root's .bazelignore (Bazel does not read them either)."""
    ignore_file = root / ".bazelignore"
    if not ignore_file.is_file():
        return set()
    lines = ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
    return {root / line.strip() for line in lines if line.strip() and not line.startswith("#")}


def collect_files(path: Path, root: Path, names: tuple[str, ...], suffix: str) -> list[Path]:
    """Build files (entry names or `suffix`) under `path`, sorted, skipping Bazel output trees
    and symbolic links to directories."""
    if path.is_file():
        return [path]
    ignored = {str(d) for d in _ignored_dirs(root)}
    wanted = frozenset(names)
    found: list[Path] = []
    # Strings and os.scandir rather than os.walk and Path: a tree has many more directories
    # than build files, and this runs once for each of them.
    pending = [str(path)]
    while pending:
        here = pending.pop()
        files, dirs = [], []
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    name = entry.name
                    if entry.is_dir():
                        # Links to directories (Bazel's bazel-* output trees among them) are
                        # not followed: they lead out of the tree or round in a loop.
                        if name not in _SKIPPED_DIRS and not entry.is_symlink():
                            dirs.append(entry.path)
                    elif name in wanted or name.endswith(suffix):
                        files.append(name)
        except OSError:
            continue  # unreadable: Bazel and Buck cannot read it either
        found.extend(Path(here, f) for f in sorted(files))
        pending.extend(sorted((d for d in dirs if d not in ignored), reverse=True))
    return found


@dataclass(frozen=True)
class ResolvedLabel:
    """A load() label mapped onto the tree: the file and the package it belongs to."""

    path: Path
    package: str  # root-relative directory, "" for the root package


def resolve_label(
    label: str, root: Path, current_package: str, repo_mappings: dict[str, str]
) -> ResolvedLabel | None:
    """Maps `//pkg:file.bzl`, `:file.bzl` and mapped cell/repo prefixes onto the tree.

    Returns None for labels of other repositories/cells that no mapping brings into the tree.
    """
    for prefix in sorted(repo_mappings, key=len, reverse=True):
        if label.startswith(prefix):
            label = repo_mappings[prefix] + label[len(prefix) :]
            break
    if label.startswith("//"):
        package, sep, target = label[2:].partition(":")
        if not sep:  # `//pkg/file.bzl` is not a label Bazel accepts; Buck's `//pkg/file.bzl` is
            package, _, target = package.rpartition("/")
    elif label.startswith(":"):
        package, target = current_package, label[1:]
    elif "//" in label or label.startswith("@"):
        return None
    else:  # a bare relative file name, as older Buck files write it
        package, target = current_package, label
    package = package.strip("/")
    return ResolvedLabel(path=root / package / target, package=package)
