#!/usr/bin/env bash
# Smoke form of the payload fuzzer: a fixed, deterministic budget of mutated payloads through the
# sanitized read path (see fuzz_smoke_main.cc). Any sanitizer report or crash fails the test.
set -euo pipefail
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The runtime logs every rejected payload; keep the last lines only.
"$1" --iterations="${2:-20000}" 2> stderr.log || {
  tail -40 stderr.log
  exit 1
}
