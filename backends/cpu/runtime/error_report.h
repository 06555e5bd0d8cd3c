// Errors of the CPU delegate: each is logged through ExecuTorch's ET_LOG (what a user of the
// runtime sees) and kept as the process's last error message (what tests and tools can query
// through et_cpu_runtime_last_error(), see cpu_backend.cc).
#pragma once

#include <string>
#include <string_view>

#include <executorch/runtime/core/error.h>

namespace et_cpu_plugin {
namespace cpu {

// What printable_text keeps as it is, beyond printable ASCII.
enum class TextSafety {
  // Nothing: survives any log sink, even one that cuts a message mid-character (ExecuTorch's
  // ET_LOG buffer, whose Python sink aborts the process on text that is not UTF-8).
  kAscii,
  // Well-formed UTF-8 (RFC 3629) without control characters: names stay readable on a terminal.
  kUtf8,
};

// `text` with every byte it may not keep written as \xNN (control characters always are).
std::string printable_text(std::string_view text, TextSafety safety = TextSafety::kAscii);

// Formats the message printf-style, logs it, records it and returns `code`.
executorch::runtime::Error report_error(executorch::runtime::Error code, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

// The most recent message report_error recorded in this process ("" if none).
std::string last_error_message();

}  // namespace cpu
}  // namespace et_cpu_plugin
