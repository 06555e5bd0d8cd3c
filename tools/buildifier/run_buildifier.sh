#!/usr/bin/env bash
# `bazel run //:buildifier`: formats every Starlark file of the workspace in place.
set -euo pipefail
buildifier="$(readlink -f "$1")"
# shellcheck source=/dev/null
source "$2"
shift 2
cd "${BUILD_WORKSPACE_DIRECTORY:?run this through bazel run //:buildifier}"
git ls-files -z --cached --others --exclude-standard \
  'WORKSPACE' '*/WORKSPACE' 'BUILD' '*/BUILD' 'BUILD.bazel' '*/BUILD.bazel' '*.bzl' \
  'BUCK' '*/BUCK' 'TARGETS' '*/TARGETS' \
  | xargs -0 --no-run-if-empty "$buildifier" -mode=fix -lint=fix "$BUILDIFIER_WARNINGS" "$@"
echo "buildifier: formatted the workspace's Starlark files"
