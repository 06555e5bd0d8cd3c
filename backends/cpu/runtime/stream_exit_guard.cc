// Puts std::cout, std::cerr and std::clog back on the buffers they had when this library was
// loaded, once, when the process exits: before libstdc++ flushes them for the last time.
//
// Why (issue 43): ExecuTorch's Python bindings wrap every call (`forward`, `run_method`, loading)
// in pybind11's scoped_ostream_redirect / scoped_estream_redirect, which swap the process-wide
// std::cout / std::cerr buffer for one that lives on the calling thread's stack and swap the old
// one back when the call returns. The method itself runs with the GIL released, so calls from
// several Python threads overlap and restore out of order: thread A installs its buffer, B saves
// A's and installs its own, A restores the original, B restores A's buffer, which no longer
// exists. std::cout then points into a dead stack frame, and `std::ios_base::Init::~Init` flushes
// it at exit: SIGSEGV (or a jump to garbage) after every output was right. Any delegate's calls
// leave it so; whether exit crashes depends on what the dead frame's memory holds by then.
//
// What this fixes: the crash at exit. What it cannot fix: between overlapping calls and exit, a
// C++ write to std::cout / std::cerr outside such a call (none in this library, ExecuTorch or
// oneDNN: they log through stdio) would still go to the dead buffer. The runtime README's
// "Threads" section states the contract.
#include <iostream>

namespace et_cpu_plugin {
namespace cpu {
namespace {

class StreamExitGuard {
 public:
  // Runs when the library is loaded (ctypes.CDLL or the runner's start), outside any redirected
  // call, so these are the streams' own buffers.
  StreamExitGuard() : out_(std::cout.rdbuf()), err_(std::cerr.rdbuf()), log_(std::clog.rdbuf()) {}

  // Registered after libstdc++'s own ios_base::Init (loaded before this library), so it runs
  // before the final flush.
  ~StreamExitGuard() {
    if (std::cout.rdbuf() != out_) std::cout.rdbuf(out_);
    if (std::cerr.rdbuf() != err_) std::cerr.rdbuf(err_);
    if (std::clog.rdbuf() != log_) std::clog.rdbuf(log_);
  }

  StreamExitGuard(const StreamExitGuard&) = delete;
  StreamExitGuard& operator=(const StreamExitGuard&) = delete;

 private:
  std::streambuf* out_;
  std::streambuf* err_;
  std::streambuf* log_;
};

const StreamExitGuard guard;

}  // namespace
}  // namespace cpu
}  // namespace et_cpu_plugin
