// Errors of the CPU delegate: each is logged through ExecuTorch's ET_LOG (what a user of the
// runtime sees) and kept as the process's last error message (what tests and tools can query
// through et_cpu_runtime_last_error(), see cpu_backend.cc).
#pragma once

#include <string>

#include <executorch/runtime/core/error.h>

namespace et_cpu_plugin {
namespace cpu {

// `text` with every byte outside printable ASCII written as \xNN: safe for any log sink.
std::string printable_text(const char* text);

// Formats the message printf-style, logs it, records it and returns `code`.
executorch::runtime::Error report_error(executorch::runtime::Error code, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

// The most recent message report_error recorded in this process ("" if none).
std::string last_error_message();

}  // namespace cpu
}  // namespace et_cpu_plugin
