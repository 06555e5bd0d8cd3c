#include "backends/cpu/runtime/error_report.h"

#include <cstdarg>
#include <cstdio>
#include <mutex>

#include <executorch/runtime/platform/log.h>

namespace et_cpu_plugin {
namespace cpu {
namespace {

std::mutex& last_error_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::string& last_error_storage() {
  static std::string message;
  return message;
}

}  // namespace

std::string printable_text(const char* text) {
  std::string out;
  for (const char* c = text; *c != '\0'; ++c) {
    const auto byte = static_cast<unsigned char>(*c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += *c;
    } else {
      char escape[5];
      std::snprintf(escape, sizeof(escape), "\\x%02x", byte);
      out += escape;
    }
  }
  return out;
}

executorch::runtime::Error report_error(executorch::runtime::Error code, const char* format, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  // Names and keys come from the (possibly corrupted) file: only printable ASCII reaches the log,
  // whose Python sink (portable_lib) aborts the process on text that is not UTF-8.
  const std::string message = printable_text(buffer);
  ET_LOG(Error, "CpuBackend: %s", message.c_str());
  std::lock_guard<std::mutex> lock(last_error_mutex());
  last_error_storage() = message;
  return code;
}

std::string last_error_message() {
  std::lock_guard<std::mutex> lock(last_error_mutex());
  return last_error_storage();
}

}  // namespace cpu
}  // namespace et_cpu_plugin
