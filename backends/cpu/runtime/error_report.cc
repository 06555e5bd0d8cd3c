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

executorch::runtime::Error report_error(executorch::runtime::Error code, const char* format, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  ET_LOG(Error, "CpuBackend: %s", buffer);
  std::lock_guard<std::mutex> lock(last_error_mutex());
  last_error_storage() = buffer;
  return code;
}

std::string last_error_message() {
  std::lock_guard<std::mutex> lock(last_error_mutex());
  return last_error_storage();
}

}  // namespace cpu
}  // namespace et_cpu_plugin
