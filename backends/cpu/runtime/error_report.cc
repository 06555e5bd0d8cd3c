#include "backends/cpu/runtime/error_report.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string_view>

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

std::atomic<bool> to_stderr{false};

void emit(LogLevel level, const char* message) {
  if (to_stderr.load(std::memory_order_relaxed)) {
    std::fprintf(stderr, "[CpuBackend %s] %s\n", level == LogLevel::kError ? "error" : "info",
                 message);  // one call: stdio keeps the line whole between threads
  } else if (level == LogLevel::kError) {
    ET_LOG(Error, "CpuBackend: %s", message);
  } else {
    ET_LOG(Info, "CpuBackend: %s", message);
  }
}

// Length of the well-formed UTF-8 sequence at text[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0.
size_t utf8_sequence(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (i + length > text.size() || byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

}  // namespace

std::string printable_text(std::string_view text, TextSafety safety) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    size_t length = lead < 0x80 ? 1 : (safety == TextSafety::kUtf8 ? utf8_sequence(text, i) : 0);
    if (lead < 0x20 || lead == 0x7f) length = 0;
    if (length == 0) {
      char escape[5];
      std::snprintf(escape, sizeof(escape), "\\x%02x", lead);
      out += escape;
      ++i;
    } else {
      out.append(text, i, length);
      i += length;
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
  emit(LogLevel::kError, message.c_str());
  std::lock_guard<std::mutex> lock(last_error_mutex());
  last_error_storage() = message;
  return code;
}

void log_line(LogLevel level, const char* format, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  emit(level, printable_text(buffer).c_str());
}

void log_to_stderr() { to_stderr.store(true); }

std::string last_error_message() {
  std::lock_guard<std::mutex> lock(last_error_mutex());
  return last_error_storage();
}

}  // namespace cpu
}  // namespace et_cpu_plugin
