// Compiles the generated header against Debian's libflatbuffers-dev, so a flatc/header version skew
// fails this package's build rather than the runtime's.
#include "backends/cpu/serialization/schema_generated.h"

namespace {
[[maybe_unused]] bool has_identifier(const void* buffer) {
  return et_cpu_plugin::cpu::fb::GraphBufferHasIdentifier(buffer);
}
}  // namespace
