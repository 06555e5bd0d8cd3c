"""No package registry's host name is written in the repository.

Registries are reached through the machine's own configuration (apt sources, pip.conf, npmrc),
never through a host the repository names: tools/ci/debian13.sh reads the Debian mirror from the
machine's apt sources. This test reads every file git tracks in the checkout (found through the
runfiles symlink of tools/ci/BUILD.bazel) and fails on any of the hosts below. The host names are
assembled from their labels so that this file does not contain them either.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

_REGISTRY_HOSTS = tuple(
    ".".join(labels)
    for labels in (
        ("deb", "debian", "org"),
        ("security", "debian", "org"),
        ("ftp", "debian", "org"),
        ("archive", "ubuntu", "com"),
        ("security", "ubuntu", "com"),
        ("pypi", "org"),
        ("files", "pythonhosted", "org"),
        ("download", "pytorch", "org"),
        ("registry", "npmjs", "org"),
        ("registry", "yarnpkg", "com"),
        ("proxy", "golang", "org"),
        ("crates", "io"),
        ("repo1", "maven", "org"),
        ("repo", "maven", "apache", "org"),
        ("rubygems", "org"),
        ("conda", "anaconda", "org"),
    )
)


def _checkout() -> Path:
    marker = (Path(__file__).absolute().parent.parent / "BUILD.bazel").resolve()
    root = marker.parents[2]
    assert (root / "WORKSPACE").is_file(), f"no checkout found from {marker}"
    return root


def _tracked_files(root: Path) -> list[Path]:
    """Files git tracks (every file outside .git and bazel-* when git is not available)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True, text=True
        ).stdout.split("\0")
        return [root / p for p in listed if p and (root / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        found: list[Path] = []
        for directory, subdirs, names in os.walk(root):
            subdirs[:] = [d for d in subdirs if d != ".git" and not d.startswith("bazel-")]
            found.extend(Path(directory) / name for name in names)
        return found


def _hosts_in(text: str) -> list[str]:
    lowered = text.lower()
    return [host for host in _REGISTRY_HOSTS if host in lowered]


def test_no_registry_host_in_tracked_files() -> None:
    root = _checkout()
    files = _tracked_files(root)
    assert len(files) > 100
    offenders = []
    for path in files:
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        for host in _hosts_in(data.decode("utf-8", errors="replace")):
            offenders.append(f"{path.relative_to(root)}: {host}")
    assert offenders == []


def test_the_check_sees_a_host() -> None:
    host = _REGISTRY_HOSTS[0]
    assert _hosts_in(f"URIs: http://{host.upper()}/debian") == [host]
    assert _hosts_in("URIs: http://mirror.example/debian") == []
