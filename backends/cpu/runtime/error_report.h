// The CPU delegate's log lines and errors. Every line goes through `log_line`: by default to
// ExecuTorch's ET_LOG (the process's PAL: what a C++ user of the runtime sees), or, once
// `log_to_stderr()` was called, straight to stderr as one write. The Python loader switches to
// stderr: ExecuTorch's Python bindings send ET_LOG to std::cerr, which they point at a buffer of
// the Python call in progress, and a line logged on one thread while another thread's call runs
// lands in that call's buffer, or in a finished call's (issue 43: memory corruption).
// Errors are also kept as the process's last error message (what tests and tools can query
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

enum class LogLevel { kInfo, kError };

// Logs "CpuBackend: <message>" (formatted printf-style) to the current sink.
void log_line(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// From now on, log_line writes to stderr instead of ExecuTorch's PAL (see above).
void log_to_stderr();

// Formats the message printf-style, logs it, records it and returns `code`.
executorch::runtime::Error report_error(executorch::runtime::Error code, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

// The most recent message report_error recorded in this process ("" if none).
std::string last_error_message();

}  // namespace cpu
}  // namespace et_cpu_plugin
