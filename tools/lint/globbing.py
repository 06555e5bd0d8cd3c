"""`glob()` as build files see it: a package's files matching patterns, subpackages left out.

Bazel and Buck2 both stop a glob at a directory holding a build file of its own (a subpackage),
return files only, and sort the result. Directory listings are kept for the whole run: packages
glob the same directories again (`srcs`, `hdrs`, a test per file), and a listing costs a system
call where a match costs a string comparison. Names starting with "." match only a pattern
segment that starts with "." (as Python's glob has it).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterable
from functools import cache

_MAGIC = frozenset("*?[")


@cache
def _segment_matcher(segment: str) -> Callable[[str], bool]:
    """Whether a file or directory name matches one segment of a pattern (no "/" in it)."""
    if not _MAGIC.intersection(segment):
        return segment.__eq__
    match = re.compile(fnmatch.translate(segment)).match
    if segment.startswith("."):
        return lambda name: match(name) is not None
    return lambda name: not name.startswith(".") and match(name) is not None


class Globber:
    """Answers the glob() calls of every package under one root."""

    def __init__(self, entry_files: Iterable[str]) -> None:
        self._entry_files = frozenset(entry_files)
        self._listings: dict[str, tuple[list[str], list[str]]] = {}  # dir -> (files, dirs)

    def glob(self, package_dir: str, include: Iterable[str], exclude: Iterable[str]) -> list[str]:
        """Package-relative paths of the files under `package_dir` matching `include` but no
        `exclude` pattern, sorted."""
        found: set[str] = set()
        for pattern in include:
            self._match(package_dir, "", pattern.split("/"), found)
        if found:
            excluded: set[str] = set()
            for pattern in exclude:
                self._match(package_dir, "", pattern.split("/"), excluded)
            found -= excluded
        return sorted(found)

    def _listing(self, directory: str) -> tuple[list[str], list[str]]:
        listing = self._listings.get(directory)
        if listing is None:
            files: list[str] = []
            dirs: list[str] = []
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if entry.is_file():
                            files.append(entry.name)
                        elif entry.is_dir():
                            dirs.append(entry.name)
            except OSError:
                pass  # unreadable or gone: nothing in it matches
            listing = self._listings[directory] = (files, dirs)
        return listing

    def _enters(self, directory: str, name: str) -> bool:
        """Whether a glob goes into the directory `name` below `directory`: not a subpackage."""
        return self._entry_files.isdisjoint(self._listing(os.path.join(directory, name))[0])

    def _match(self, directory: str, prefix: str, segments: list[str], found: set[str]) -> None:
        segment, rest = segments[0], segments[1:]
        files, dirs = self._listing(directory)
        if segment == "**":  # zero or more directories
            if rest:
                self._match(directory, prefix, rest, found)
            else:
                found.update(prefix + name for name in files)
            for name in dirs:
                if not name.startswith(".") and self._enters(directory, name):
                    self._match(os.path.join(directory, name), f"{prefix}{name}/", segments, found)
            return
        matches = _segment_matcher(segment)
        if not rest:
            found.update(prefix + name for name in files if matches(name))
            return
        for name in dirs:
            if matches(name) and self._enters(directory, name):
                self._match(os.path.join(directory, name), f"{prefix}{name}/", rest, found)
