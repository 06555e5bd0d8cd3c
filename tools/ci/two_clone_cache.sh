#!/usr/bin/env bash
# two_clone_cache.sh: the second half of .ci/run's remote-cache proof. The first clone (the one
# .ci/run runs in) has run `./bazelw test --config=remote-cache //...` against the loopback HTTP
# cache of tools/ci/http_cache.sh. This clones the same commit to another path, runs the same
# command there against the same cache, and has tools/ci/cache_hits.py check from Bazel's own
# output that nothing cacheable ran again and that the shared venv was reused. The second clone
# and its Bazel output base are deleted at the end.
#
#   tools/ci/two_clone_cache.sh URL WORKDIR FIRST_LOG FIRST_EXEC_LOG [TARGET...]
#
# TARGET... defaults to //... (what the first run tested; a smaller set for a quick try).
# Exit codes: those of cache_hits.py (0 no miss, 1 misses or a failed second run, 2 bad input).
set -uo pipefail
[[ $# -ge 4 ]] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
url=$1
work=$2
first_log=$3
first_exec=$4
shift 4
targets=("$@")
[[ $# -gt 0 ]] || targets=(//...)
repo="$(cd "$(dirname "$0")/../.." && pwd)"
second="$work/second-clone"

git clone -q --shared "$repo" "$second" && git -C "$second" checkout -q --detach "$(git -C "$repo" rev-parse HEAD)" ||
  { echo "two_clone_cache: error: cannot clone $repo to $second" >&2; exit 2; }
[[ -z "$(git -C "$repo" status --porcelain --untracked-files=no)" ]] ||
  echo "two_clone_cache: warning: $repo has uncommitted changes; the second clone has HEAD only" >&2

echo "== ci: remote cache, second clone at $second"
start=$(date +%s)
(cd "$second" && ./bazelw test --config=remote-cache --remote_cache="$url" --disk_cache= \
  --execution_log_json_file="$work/second.exec.json" "${targets[@]}") >"$work/second.log" 2>&1
echo "two_clone_cache: second clone's ./bazelw test ${targets[*]} exited $? after $(($(date +%s) - start)) s"
grep -aE '^(INFO: [0-9]+ process|INFO: Elapsed|Executed |DEBUG: .*python_venv)' "$work/second.log"

python3 "$repo/tools/ci/cache_hits.py" --first-log "$first_log" --first-exec "$first_exec" \
  --second-log "$work/second.log" --second-exec "$work/second.exec.json"
status=$?

# The second clone's output base (~2 GB) and the clone itself; the shared venv is kept.
(cd "$second" && ./bazelw clean --expunge >/dev/null 2>&1) ||
  echo "two_clone_cache: warning: could not expunge the second clone's output base" >&2
rm -rf "$second"
exit $status
