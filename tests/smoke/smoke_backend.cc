// Smallest possible delegate: proves a C++17 library compiled against the executorch wheel's headers
// and linked to its libexecutorch.so registers into the registry the Python runtime uses.
#include <executorch/runtime/backend/interface.h>

namespace {

using executorch::runtime::ArrayRef;
using executorch::runtime::Backend;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Result;
using executorch::runtime::Span;

class SmokeBackend final : public BackendInterface {
 public:
  bool is_available() const override { return true; }

  Result<DelegateHandle*> init(BackendInitContext&, FreeableBuffer*,
                               ArrayRef<CompileSpec>) const override {
    return Error::NotSupported;
  }

  Error execute(BackendExecutionContext&, DelegateHandle*,
                Span<EValue*>) const override {
    return Error::NotSupported;
  }
};

SmokeBackend backend;
const Backend registration{"EtCpuPluginSmokeBackend", &backend};
const auto registered = executorch::runtime::register_backend(registration);

}  // namespace
