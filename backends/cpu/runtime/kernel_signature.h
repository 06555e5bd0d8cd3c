// Argument signatures of the kernels a route may name, generated at build time from torch's and
// the executorch wheel's schemas (gen_kernel_signatures.py). The runtime checks a payload's
// arguments against them in init: a kernel wrapper unboxes its stack by position with aborting
// checks, so a mismatch must never reach it.
#pragma once

#include <cstddef>
#include <vector>

namespace et_cpu_plugin {
namespace cpu {

// One schema argument: its kind code (see gen_kernel_signatures.py) and whether None is accepted.
struct ArgSpec {
  char kind;
  bool optional;
};

// The signature code of `kernel_name` (e.g. "TTsW" for "aten::add.out"), or nullptr when
// unknown.
const char* find_kernel_signature(const char* kernel_name);

// Splits a signature code into its arguments.
std::vector<ArgSpec> parse_signature(const char* code);

}  // namespace cpu
}  // namespace et_cpu_plugin
