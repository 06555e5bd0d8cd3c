#!/usr/bin/env bash
# tools/ci/debian13.sh: proves that the README's two commands pass on Debian 13 (trixie).
#
# Run as root on a Debian machine of this project's kind (Debian 12 here). It builds (or reuses) a
# trixie root file system with debootstrap, makes it look like this machine kind's Debian 13 image
# (Debian 12's python3.11 beside trixie, this machine's pip configuration and CA certificates),
# clones the repository fresh into it and runs, inside the chroot, as root, in a clean environment:
#     ./bazelw run //tools/lower
#     ./bazelw test //...
# See --help for flags and exit codes. Not a Bazel target: it runs Bazel itself, inside the chroot.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
script_start=$SECONDS

# --- settings -----------------------------------------------------------------------------------
# The Debian mirror (and its security archive) come from this machine's own apt sources, or from
# ET_CI_DEBIAN_MIRROR / ET_CI_DEBIAN_SECURITY_MIRROR: no package host is written here (see
# apt_source_uri below).
readonly CLONE_IN=/root/et_cpu_plugin          # where the clone lives inside the chroot
readonly STATE_IN=/var/lib/et-ci               # our bookkeeping inside the chroot
readonly RECIPE=3                              # bump when prepare_rootfs changes: re-prepares
readonly CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# pip's configuration on this machine kind (pip config list / pip config debug): the local wheel
# and index directories, the constraints file, the machine-wide and root's own pip.conf (the latter
# holds find-links and extra-index-url). Mounted read-only at the same paths inside the chroot.
readonly PIP_SHARES=(/opt/wheels /opt/pypi /opt/pypi-more /etc/xdg/pip /etc/pip.conf /root/.config/pip)
readonly PIP_SHARES_OPTIONAL=(/root/.pip /etc/xdg/pip.conf)
# Host environment passed into the chroot besides PATH, HOME, LANG and every PIP_* variable: the
# machine's egress TLS proxy needs its CA, which these point at (the file is rebuilt inside the
# chroot from the same CA certificates).
readonly CA_VARS=(SSL_CERT_FILE SSL_CERT_DIR NODE_EXTRA_CA_CERTS REQUESTS_CA_BUNDLE CURL_CA_BUNDLE GIT_SSL_CAINFO)

usage() {
  cat <<EOF
Usage: $0 [OPTIONS]

Proves that the README's two commands pass on Debian 13 (trixie), from a clean clone, inside a
trixie root file system built with debootstrap on this (Debian 12) machine. Run as root.

Debian mirror: the one this machine's apt sources use for its own release (and its -security
suite), unless ET_CI_DEBIAN_MIRROR / ET_CI_DEBIAN_SECURITY_MIRROR name others.

Steps: installs debootstrap on the host if missing; creates the trixie root file system (or reuses
it); installs there Debian 12's python3.11 and python3.11-venv (as this machine kind's Debian 13
image carries them), ca-certificates and git; mounts /proc, /sys, /dev, /dev/pts, /dev/shm and,
read-only, pip's local wheel directories and configuration:
    $(IFS=' '; echo "${PIP_SHARES[*]}")
clones the repository at REV into ${CLONE_IN} inside; runs, in a clean environment (PATH, HOME,
LANG, the PIP_* and CA variables only):
    ./bazelw run //tools/lower
    ./bazelw test //...
and prints a summary. Everything it mounted is unmounted on exit, failure or Ctrl-C.

Options:
  --root DIR       the trixie root file system (default: /var/tmp/et_cpu_plugin-debian13)
  --recreate       delete DIR and build it anew with debootstrap (default: reuse it; a reused one
                   keeps the Debian packages that earlier runs' ./bazelw installed)
  --repo PATH      repository to clone (default: the one this script lives in: $(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null || echo '?'))
  --rev REV        commit to test (default: HEAD); only committed files are seen
  --keep-cache     keep /root/.cache (Bazel's output base, the ~1.7 GB venv, pip's cache) from the
                   last run; by default it is deleted first, so the run starts as on a fresh machine
  --command ARGS   run ./bazelw ARGS instead of the two README commands (repeatable; words split
                   on spaces), e.g. --command 'build //tools/lint/...'
  --setup-only     set up, then check the chroot (python3.11 -m venv, pip finds the local torch
                   wheel offline, apt-get works) and stop: no clone, no Bazel
  --log FILE       log file (default: /var/tmp/et_cpu_plugin-debian13-YYYYmmdd-HHMMSS.log)
  -h, --help       this text

Exit codes:
  0  every command passed (or --setup-only: setup and checks passed)
  1  a command failed (its output is in the log; the summary names it)
  2  usage error, setup failed, or interrupted

Duration (2 shared cores): a new root file system ~1.5 min (debootstrap ~30-45 s, python3.11 etc.
~40 s); the first ./bazelw run //tools/lower ~2 min (apt installs Bazel, g++ and npm, Bazel builds
the 1.6 GB venv from the local wheels, builds and lowers); ./bazelw test //... ~15 min. Deleting the
last run's cache (the default) or the old root file system (--recreate) takes 1-3 min more.
Disk: ~4 GB under DIR.
EOF
}

# --- arguments ----------------------------------------------------------------------------------
root=/var/tmp/et_cpu_plugin-debian13
repo=""
rev=HEAD
recreate=0
keep_cache=0
setup_only=0
log=""
commands=()

usage_error() {
  echo "debian13: error: $*" >&2
  echo "Try: $0 --help" >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --root) [[ $# -ge 2 ]] || usage_error "--root needs a directory"; root="$2"; shift 2 ;;
    --root=*) root="${1#*=}"; shift ;;
    --repo) [[ $# -ge 2 ]] || usage_error "--repo needs a path"; repo="$2"; shift 2 ;;
    --repo=*) repo="${1#*=}"; shift ;;
    --rev) [[ $# -ge 2 ]] || usage_error "--rev needs a revision"; rev="$2"; shift 2 ;;
    --rev=*) rev="${1#*=}"; shift ;;
    --log) [[ $# -ge 2 ]] || usage_error "--log needs a file"; log="$2"; shift 2 ;;
    --log=*) log="${1#*=}"; shift ;;
    --command) [[ $# -ge 2 ]] || usage_error "--command needs bazelw arguments"; commands+=("$2"); shift 2 ;;
    --command=*) commands+=("${1#*=}"); shift ;;
    --recreate) recreate=1; shift ;;
    --keep-cache) keep_cache=1; shift ;;
    --setup-only) setup_only=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown argument: $1" ;;
  esac
done

[[ $(id -u) -eq 0 ]] || usage_error "run as root (debootstrap, mount and chroot need it)"

# The URI of the first enabled "deb" source on this machine that serves `suite`, from the
# one-line format (/etc/apt/sources.list, sources.list.d/*.list: "deb [options] URI SUITE ...")
# and the deb822 one (sources.list.d/*.sources: Types / URIs / Suites / Enabled stanzas); empty
# when none does.
apt_source_uri() {
  local suite="$1" files=()
  [[ ! -f /etc/apt/sources.list ]] || files+=(/etc/apt/sources.list)
  local f
  for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ ! -f $f ]] || files+=("$f")
  done
  [[ ${#files[@]} -gt 0 ]] || return 0
  awk -v want="$suite" '
    function has(list, word) { return index(" " list " ", " " word " ") > 0 }
    function flush() {
      if (!found && uri != "" && enabled != "no" && has(types, "deb") && has(suites, want)) {
        print uri
        found = 1
      }
      types = ""; suites = ""; uri = ""; enabled = ""
    }
    function rest(    i, out) { out = ""; for (i = 2; i <= NF; i++) out = out " " $i; return out }
    FNR == 1 { flush() }
    FILENAME ~ /\.sources$/ {
      if ($0 ~ /^[[:space:]]*$/) { flush(); next }
      if ($0 ~ /^[[:space:]]*#/) next
      key = tolower($1)
      if (key == "types:") types = rest()
      else if (key == "uris:") uri = $2
      else if (key == "suites:") suites = rest()
      else if (key == "enabled:") enabled = tolower($2)
      next
    }
    {
      line = $0
      sub(/#.*/, "", line)
      gsub(/\[[^]]*\]/, "", line)
      n = split(line, word, /[[:space:]]+/)
      first = word[1] == "" ? 2 : 1
      if (!found && word[first] == "deb" && word[first + 2] == want) { print word[first + 1]; found = 1 }
    }
    END { flush() }
  ' "${files[@]}"
}

host_codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
MIRROR="${ET_CI_DEBIAN_MIRROR:-$(apt_source_uri "$host_codename")}"
SECURITY_MIRROR="${ET_CI_DEBIAN_SECURITY_MIRROR:-$(apt_source_uri "$host_codename-security")}"
readonly MIRROR SECURITY_MIRROR
[[ -n $MIRROR ]] ||
  usage_error "no apt source of this machine serves '$host_codename' (/etc/apt/sources.list," \
    "sources.list.d/*.list, *.sources); set ET_CI_DEBIAN_MIRROR"
[[ -n $SECURITY_MIRROR ]] ||
  usage_error "no apt source of this machine serves '$host_codename-security';" \
    "set ET_CI_DEBIAN_SECURITY_MIRROR"
[[ ${#commands[@]} -gt 0 ]] || commands=("run //tools/lower" "test //...")

# The root directory: absolute, no whitespace (findmnt output is parsed), and never a system
# directory: everything mounted below it is unmounted and, with --recreate, it is deleted.
[[ $root == /* ]] || usage_error "--root must be an absolute path: $root"
[[ $root != *[[:space:]]* ]] || usage_error "--root must not contain whitespace: $root"
root="$(realpath -m "$root")"
case "$root" in
  / | /bin | /boot | /dev | /etc | /home | /lib | /lib64 | /media | /mnt | /opt | /proc | /root | /run | \
    /sbin | /srv | /sys | /tmp | /usr | /usr/* | /var | /var/tmp | /var/lib | /var/cache | /work | /etc/* | \
    /proc/* | /sys/* | /dev/* | /boot/* | /opt/*)
    usage_error "refusing --root $root: a system directory" ;;
esac
[[ $(awk -F/ '{print NF - 1}' <<<"$root") -ge 2 ]] || usage_error "refusing --root $root: too shallow (use e.g. /var/tmp/NAME)"

if [[ -z $repo ]]; then
  repo="$(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null)" || usage_error "no --repo given and $script_dir is not in a git repository"
fi
repo="$(realpath "$repo")" || usage_error "no repository at $repo"
commit="$(git -C "$repo" rev-parse --verify --quiet "${rev}^{commit}")" || usage_error "$rev is no commit in $repo"

[[ -n $log ]] || log="/var/tmp/et_cpu_plugin-debian13-$(date +%Y%m%d-%H%M%S).log"
mkdir -p "$(dirname "$log")"
: >"$log"
log="$(realpath "$log")"

# --- helpers ------------------------------------------------------------------------------------
say() { printf '== debian13: %s\n' "$*" | tee -a "$log"; }
warn() { printf 'debian13: warning: %s\n' "$*" | tee -a "$log" >&2; }
fail_setup() { printf 'debian13: error: %s\n' "$*" | tee -a "$log" >&2; exit 2; }

# Runs a command quietly into the log; on failure shows the log's tail and fails.
quiet() {
  local desc="$1"
  shift
  local mark
  mark=$(wc -l <"$log")
  if ! "$@" >>"$log" 2>&1; then
    tail -n +"$((mark + 1))" "$log" | tail -n 30 >&2
    fail_setup "$desc failed (full output in $log)"
  fi
}

# Mount points at or below DIR (deepest first). Only paths under DIR: never a host file system.
mounts_under() {
  local dir="$1" target
  findmnt -rn -o TARGET | while IFS= read -r target; do
    target="$(printf '%b' "$target")" # findmnt -r escapes e.g. a space as \x20
    if [[ $target == "$dir" || $target == "$dir"/* ]]; then
      printf '%s\n' "$target"
    fi
  done | sort -r -u
}

unmount_under() {
  local dir="$1" target pass
  for pass in 1 2 3; do
    [[ -n "$(mounts_under "$dir")" ]] || return 0
    while IFS= read -r target; do
      [[ $target == "$dir"/* ]] || continue # the guard: strictly below DIR
      umount "$target" 2>/dev/null || { [[ $pass -ge 2 ]] && umount -l "$target" 2>/dev/null; } || true
    done < <(mounts_under "$dir")
  done
  [[ -z "$(mounts_under "$dir")" ]]
}

# Processes whose root directory is DIR or below: those this script started in the chroot.
procs_in() {
  local dir="$1" p link
  for p in /proc/[0-9]*; do
    link="$(readlink "$p/root" 2>/dev/null)" || continue
    if [[ $link == "$dir" || $link == "$dir"/* ]]; then
      printf '%s\n' "${p#/proc/}"
    fi
  done
}

kill_procs_in() {
  local dir="$1" pids i
  mapfile -t pids < <(procs_in "$dir")
  [[ ${#pids[@]} -gt 0 ]] || return 0
  warn "ending ${#pids[@]} process(es) left in $dir: ${pids[*]}"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for i in $(seq 1 20); do
    mapfile -t pids < <(procs_in "$dir")
    [[ ${#pids[@]} -gt 0 ]] || return 0
    sleep 0.5
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  sleep 1
}

# The clean environment of every command run inside the chroot.
chroot_env=(PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8)
[[ -z ${TERM:-} ]] || chroot_env+=(TERM="$TERM")
while IFS= read -r name; do
  chroot_env+=("$name=${!name}")
done < <(compgen -e | grep -E '^PIP_' || true)
for name in "${CA_VARS[@]}"; do
  [[ -z ${!name:-} ]] || chroot_env+=("$name=${!name}")
done

in_chroot() { chroot "$root" /usr/bin/env -i "${chroot_env[@]}" "$@"; }

# --- cleanup ------------------------------------------------------------------------------------
phase=setup # setup -> run -> finished
bazel_started=0
# shellcheck disable=SC2317 # runs from the EXIT trap
cleanup() {
  local rc=$? left
  set +e
  trap - INT TERM HUP
  if [[ $bazel_started -eq 1 && -x $root/usr/bin/bazel-4 && -d $root$CLONE_IN && -d $root/proc/self ]]; then
    in_chroot /bin/sh -c "cd '$CLONE_IN' && exec timeout 120 /usr/bin/bazel-4 shutdown" >>"$log" 2>&1
  fi
  kill_procs_in "$root"
  kill_procs_in "$root.new"
  unmount_under "$root.new"
  if ! unmount_under "$root"; then
    left="$(mounts_under "$root")"
    printf 'debian13: error: could not unmount:\n%s\n' "$left" | tee -a "$log" >&2
    rc=2
  fi
  if [[ $phase != finished && $rc -ne 0 ]]; then
    echo "debian13: setup failed or interrupted (exit 2); log: $log" >&2
    rc=2
  fi
  exit "$rc"
}

# One run at a time per root directory.
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock -n 9 || usage_error "another run is using $root (lock $root.lock)"
trap cleanup EXIT
trap 'exit 2' INT TERM HUP

say "root file system: $root; repository: $repo at $commit; log: $log"

# Left over from a run that was killed hard (the lock says none is running now).
kill_procs_in "$root"
kill_procs_in "$root.new"
unmount_under "$root.new" || fail_setup "stale mounts under $root.new"
unmount_under "$root" || fail_setup "stale mounts under $root"

# --- 1. debootstrap on the host -----------------------------------------------------------------
for tool in git findmnt mount umount chroot flock realpath; do
  command -v "$tool" >/dev/null || fail_setup "$tool is missing on the host"
done
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap on the host"
  quiet "apt-get update" apt-get update -q
  quiet "apt-get install debootstrap" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
fi

# --- 2. the trixie root file system -------------------------------------------------------------
remove_tree() {
  local dir="$1"
  [[ -e $dir ]] || return 0
  kill_procs_in "$dir"
  unmount_under "$dir" || fail_setup "cannot unmount everything under $dir; not deleting it"
  [[ -z "$(mounts_under "$dir")" ]] || fail_setup "mounts left under $dir; not deleting it"
  rm -rf --one-file-system "$dir"
}

if [[ $recreate -eq 1 ]]; then
  if [[ -e $root && ! -f $root/etc/debian_version && -n "$(ls -A "$root")" ]]; then
    fail_setup "--recreate: $root holds no Debian root file system; not deleting it"
  fi
  say "--recreate: deleting $root"
  remove_tree "$root"
fi
if [[ ! -f $root/etc/debian_version ]]; then
  [[ ! -e $root ]] || [[ -z "$(ls -A "$root")" ]] || fail_setup "$root exists but holds no root file system; delete it or use --recreate"
  remove_tree "$root.new"
  say "creating the trixie root file system (debootstrap --variant=minbase trixie, ~1-2 min)"
  start=$SECONDS
  quiet "debootstrap" debootstrap --variant=minbase trixie "$root.new" "$MIRROR"
  rmdir "$root" 2>/dev/null || true
  mv "$root.new" "$root"
  say "root file system created in $((SECONDS - start)) s"
else
  say "reusing the root file system (Debian $(cat "$root/etc/debian_version"); --recreate builds it anew)"
fi

# --- 3. host files, mounts ----------------------------------------------------------------------
# Name resolution, the machine's local CA certificates (the egress proxy's), npm's and apt's
# machine-wide settings: copied in every run, as this machine kind's images carry them.
install -m 0644 /etc/resolv.conf "$root/etc/resolv.conf.new" && mv -f "$root/etc/resolv.conf.new" "$root/etc/resolv.conf"
install -m 0644 /etc/hosts "$root/etc/hosts"
if [[ -d /usr/local/share/ca-certificates ]]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
for f in /etc/npmrc /usr/etc/npmrc /etc/apt/apt.conf.d/99artifact-registry; do
  if [[ -f $f ]]; then
    mkdir -p "$root$(dirname "$f")"
    install -m 0644 "$f" "$root$f"
  fi
done
# Services never start inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"

bind() { # SRC DST [ro]
  local src="$1" dst="$2" mode="${3:-rw}"
  if [[ -d $src ]]; then
    mkdir -p "$dst"
  else
    mkdir -p "$(dirname "$dst")"
    [[ -e $dst ]] || : >"$dst"
  fi
  mount --bind "$src" "$dst"
  if [[ $mode == ro ]]; then
    mount -o remount,bind,ro "$dst"
  fi
}

say "mounting /proc, /sys, /dev, /dev/pts, /dev/shm and pip's local package directories"
mkdir -p "$root/proc" "$root/sys" "$root/dev"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys" 2>/dev/null || bind /sys "$root/sys" ro
bind /dev "$root/dev"
bind /dev/pts "$root/dev/pts"
[[ ! -d /dev/shm ]] || bind /dev/shm "$root/dev/shm"
for share in "${PIP_SHARES[@]}" "${PIP_SHARES_OPTIONAL[@]}"; do
  if [[ -e $share ]]; then
    bind "$share" "$root$share" ro
  elif [[ " ${PIP_SHARES[*]} " == *" $share "* ]]; then
    warn "$share does not exist on this machine: not mounted (pip may not find the local torch wheel)"
  fi
done

# --- 4. make it look like this machine kind's Debian 13 image -----------------------------------
# That image carries Debian 12's python3.11 packages beside trixie's python3.13 (torch 2.13.0's CPU
# wheel on disk is cp311 only). Trixie's apt sources plus bookworm's, pinned so that nothing but
# the python3.11 packages can come from bookworm. python3.11-venv depends on python3.11-distutils,
# which only bookworm's python3-distutils provides; that one depends on python3 (<< 3.12), and
# trixie's python3 (3.13, which ./bazelw's npm pulls in) conflicts with it, so apt would remove it
# and python3.11-venv with it. bookworm's python3-distutils and python3-lib2to3 are therefore
# re-packed as python3.11-distutils and python3.11-lib2to3 (same files, version +etci1), depending
# on python3.11 instead of python3: the same Python 3.11 files as on the image, and a dpkg state
# that apt can keep when trixie's python3 arrives.
write_apt_config() {
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
# Written by tools/ci/debian13.sh
Types: deb
URIs: $MIRROR
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat >"$root/etc/apt/sources.list.d/bookworm-python3.11.sources" <<EOF
# Written by tools/ci/debian13.sh: Debian 12's python3.11 only (see preferences.d/bookworm-python311.pref)
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # apt reads preferences.d files named *.pref or without a dot only.
  rm -f "$root/etc/apt/preferences.d/bookworm-python3.11"
  cat >"$root/etc/apt/preferences.d/bookworm-python311.pref" <<EOF
# Written by tools/ci/debian13.sh: from bookworm, python3.11 and its own packages only.
Package: /^(lib)?python3\.11(-[a-z0-9]+)?$/ python3-distutils python3-lib2to3
Pin: release n=bookworm
Pin-Priority: 500

Package: /^(lib)?python3\.11(-[a-z0-9]+)?$/ python3-distutils python3-lib2to3
Pin: release n=bookworm-security
Pin-Priority: 500

Package: /^(lib)?python3\.11(-[a-z0-9]+)?$/ python3-distutils python3-lib2to3
Pin: release n=bookworm-updates
Pin-Priority: 500

Package: *
Pin: release n=bookworm
Pin-Priority: -1

Package: *
Pin: release n=bookworm-security
Pin-Priority: -1

Package: *
Pin: release n=bookworm-updates
Pin-Priority: -1
EOF
}

prepare_rootfs() {
  say "preparing the root file system: apt sources, ca-certificates, git, Debian 12's python3.11 + python3.11-venv"
  write_apt_config
  quiet "apt-get update (chroot)" in_chroot apt-get update -q
  quiet "apt-get install ca-certificates git (chroot)" in_chroot env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends ca-certificates git
  # shellcheck disable=SC2016 # expanded inside the chroot
  quiet "re-packing python3-distutils, python3-lib2to3 as python3.11-* (chroot)" in_chroot /bin/sh -euxc '
    rm -rf "$1" && mkdir -p "$1" && chown _apt "$1" && cd "$1"
    apt-get download -q python3-distutils python3-lib2to3
    for name in lib2to3 distutils; do
      old="python3-$name" new="python3.11-$name"
      deb="$(ls "$old"_*_all.deb)"
      ver="$(dpkg-deb -f "$deb" Version)+etci1"
      deps=python3.11
      [ "$name" = lib2to3 ] || deps="python3.11, python3.11-lib2to3 (= $ver)"
      dpkg-deb -R "$deb" "$new"
      {
        echo "Package: $new"
        echo "Version: $ver"
        echo "Architecture: all"
        dpkg-deb -f "$deb" Maintainer Installed-Size Section Priority
        echo "Depends: $deps"
        echo "Conflicts: $old"
        echo "Replaces: $old"
        echo "Description: Debian 12 $old re-packed for python3.11 beside trixie python3"
        echo " Made by tools/ci/debian13.sh from $deb: trixie python3 conflicts with"
        echo " $old, and python3.11-venv needs $new, which only $old provided."
      } >"$new/DEBIAN/control"
      sed -i "s/$old/$new/g" "$new/DEBIAN/postinst" "$new/DEBIAN/prerm"
      cat "$new/DEBIAN/control"
      dpkg-deb -b "$new" "$new.deb"
    done
  ' sh "$STATE_IN/debs"
  quiet "apt-get install python3.11 python3.11-venv (chroot)" in_chroot env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends python3.11 \
    "$STATE_IN/debs/python3.11-lib2to3.deb" "$STATE_IN/debs/python3.11-distutils.deb" python3.11-venv
  # What ./bazelw installs later must keep them: a dry run of trixie's python3 and npm removes nothing.
  local dry
  dry="$(in_chroot apt-get install -s -q --no-install-recommends python3 npm 2>&1)" || fail_setup "apt-get install -s python3 npm failed: $dry"
  printf '%s\n' "$dry" >>"$log"
  if grep '^Remv' <<<"$dry"; then
    fail_setup "installing trixie's python3 and npm would remove the packages above"
  fi
  quiet "apt-get clean (chroot)" in_chroot apt-get clean
  echo "$RECIPE" >"$root$STATE_IN/prepared"
}

if [[ "$(cat "$root$STATE_IN/prepared" 2>/dev/null || true)" != "$RECIPE" ]]; then
  prepare_rootfs
fi
# The machine's CA certificates into the chroot's bundle (update-ca-certificates is idempotent).
quiet "update-ca-certificates (chroot)" in_chroot update-ca-certificates
quiet "python3.11 -m venv check (chroot)" in_chroot python3.11 -c 'import venv, ensurepip, ssl, sqlite3, distutils'

if [[ $setup_only -eq 1 ]]; then
  say "--setup-only: checking the chroot"
  # shellcheck disable=SC2016 # expanded inside the chroot
  check='
    set -eu
    echo "Debian $(cat /etc/debian_version); $(python3.11 --version)"
    apt-cache policy python3.11 | sed -n "1,3p"
    d="$(mktemp -d)"
    python3.11 -m venv "$d/venv"
    "$d/venv/bin/pip" --version
    "$d/venv/bin/pip" config list
    echo "-- pip download --no-deps --no-index torch==2.13.0 (local find-links only)"
    "$d/venv/bin/pip" download -q --no-deps --no-index -d "$d/dl" torch==2.13.0
    ls -l "$d/dl"
    echo "-- pip download --no-deps torch==2.13.0 (pip as configured)"
    "$d/venv/bin/pip" download --no-deps -d "$d/dl2" torch==2.13.0 2>&1 | grep -E "torch|Saved|already" | sed -n "1,5p"
    rm -rf "$d"
    echo "-- apt-get update (trixie + pinned bookworm)"
    apt-get update -q >/dev/null
    apt-get check
    apt-cache policy g++ | sed -n "1,3p"
    echo "-- bookworm pin: only python3.11 packages at 500, the rest at -1"
    apt-cache policy python3.11 python3 libc6 | grep -E "^[a-z]|^ [ *]{3} [^ ]"
    echo "-- packages not from trixie (dpkg -l | grep -E deb12|etci)"
    dpkg -l | grep -E "deb12|etci" | cut -c1-80
  '
  if ! in_chroot /bin/bash -c "$check" 2>&1 | tee -a "$log"; then
    fail_setup "setup check failed"
  fi
  say "setup OK"
  phase=finished
  exit 0
fi

# --- 5. a fresh clone ---------------------------------------------------------------------------
say "cloning $repo at $commit into $CLONE_IN"
rm -rf --one-file-system "${root:?}$CLONE_IN"
quiet "git clone" git clone --quiet --no-local --no-checkout "$repo" "$root$CLONE_IN"
quiet "git checkout $commit" git -C "$root$CLONE_IN" -c advice.detachedHead=false checkout --quiet --detach "$commit"
if [[ $keep_cache -eq 0 ]]; then
  if [[ -e $root/root/.cache ]]; then
    say "deleting /root/.cache in the chroot (Bazel's output base, pip's cache): a fresh start (a few minutes after a full run)"
    start=$SECONDS
    rm -rf --one-file-system "${root:?}/root/.cache" "${root:?}/root/.npm"
    say "deleted in $((SECONDS - start)) s"
  fi
fi

# --- 6. the commands ----------------------------------------------------------------------------
phase=run
step_names=()
step_rcs=()
step_secs=()
for cmd in "${commands[@]}"; do
  read -r -a args <<<"$cmd"
  say "step: ./bazelw ${args[*]}"
  bazel_started=1
  start=$SECONDS
  set +e
  # shellcheck disable=SC2016 # expanded inside the chroot
  in_chroot /bin/bash -c 'cd "$1" && shift && exec ./bazelw "$@"' bazelw "$CLONE_IN" "${args[@]}" </dev/null 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  set -e
  step_names+=("./bazelw ${args[*]}")
  step_rcs+=("$rc")
  step_secs+=("$((SECONDS - start))")
  say "step exit $rc after $((SECONDS - start)) s: ./bazelw ${args[*]}"
done

# --- 7. summary ---------------------------------------------------------------------------------
first_line() { "$@" 2>/dev/null | sed -n 1p || true; }
status=0
# shellcheck disable=SC2016 # dpkg-query formats
{
  echo
  echo "== debian13: summary"
  echo "commit:          $commit ($repo)"
  echo "debian_version:  $(in_chroot cat /etc/debian_version)"
  echo "python3.11:      $(first_line in_chroot python3.11 --version)"
  echo "g++:             $(first_line in_chroot g++ --version || true)"
  echo "bazel:           bazel-bootstrap $(in_chroot dpkg-query -W -f '${Version}' bazel-bootstrap 2>/dev/null || echo '(not installed)')"
  echo "python3.11-venv: $(in_chroot dpkg-query -W -f '${db:Status-Abbrev}${Version}' python3.11-venv 2>/dev/null || echo '(not installed)')"
  echo "oneDNN/flatbuffers Debian packages (dpkg -l | grep -iE 'dnnl|flatbuffers'):"
  in_chroot dpkg -l | grep -iE 'dnnl|flatbuffers' || echo "  (none)"
  for i in "${!step_names[@]}"; do
    if [[ ${step_rcs[$i]} -eq 0 ]]; then word=PASSED; else word=FAILED; fi
    printf '%-7s exit %-3s %6s s  %s\n' "$word" "${step_rcs[$i]}" "${step_secs[$i]}" "${step_names[$i]}"
  done
  echo "total: $((SECONDS - script_start)) s; log: $log"
} 2>&1 | tee -a "$log"
for rc in "${step_rcs[@]}"; do
  [[ $rc -eq 0 ]] || status=1
done
phase=finished
exit "$status"
