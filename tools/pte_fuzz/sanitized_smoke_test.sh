#!/usr/bin/env bash
# The fuzzer's smoke run on the sanitized runtime (//backends/cpu/runtime:libcpu_backend_sanitized.so,
# ASan + UBSan, Reference provider only): the interpreter preloads g++'s sanitizer runtimes, every
# forked case runs under them, and a sanitizer report is a crash. Crashes inside ExecuTorch itself
# are upstream (--allow-upstream); anything else fails the test.
# Usage: sanitized_smoke_test.sh PTE_FUZZ SANITIZED_LIBRARY [CASES_PER_PROGRAM]
set -euo pipefail
fuzz="$1"
library="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
cases="${3:-20}"
asan="$(g++ -print-file-name=libasan.so)"
ubsan="$(g++ -print-file-name=libubsan.so)"
for runtime in "$asan" "$ubsan"; do
  [[ -f "$runtime" ]] || { echo "sanitized_smoke_test: $runtime not found (g++'s sanitizer runtime)" >&2; exit 1; }
done
export ET_CPU_BACKEND_LIBRARY="$library"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
LD_PRELOAD="$asan:$ubsan" "$fuzz" --cases "$cases" --allow-upstream --quiet \
  --work-dir "${TEST_TMPDIR:-/tmp}/pte_fuzz_sanitized"
