#!/usr/bin/env bash
# Test: every Starlark file given is formatted and free of buildifier lint warnings.
set -euo pipefail
buildifier="$1"
flags="$2"
shift 2
# shellcheck source=/dev/null
source "$flags"
status=0
"$buildifier" -mode=check -lint=warn "$BUILDIFIER_WARNINGS" "$@" || status=$?
if [[ $status -ne 0 ]]; then
  echo "buildifier found unformatted files or lint warnings; fix with: ./bazelw run //:buildifier" >&2
  exit 1
fi
echo "buildifier: $# Starlark files formatted and lint-clean"
