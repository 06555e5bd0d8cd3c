// Loaded into the fuzzer's fork server (ctypes): on a fatal signal, writes the native backtrace of
// the faulting thread to stderr, then dies of the same signal. Forked children inherit the
// handlers, so every crashing case leaves its backtrace in its stderr log: whose code it is in is
// known without replaying the case under gdb.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
constexpr char kHeader[] = "pte_fuzz: fatal signal, native backtrace follows\n";
// Its own stack, so a stack overflow can still be reported.
alignas(16) char alternate_stack[1 << 16];

void on_fatal(int signal_number, siginfo_t*, void*) {
  void* frames[64];
  const int count = backtrace(frames, 64);
  ssize_t ignored = write(STDERR_FILENO, kHeader, sizeof(kHeader) - 1);
  (void)ignored;
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

}  // namespace

extern "C" int pte_fuzz_install_crash_backtrace() {
  void* warm_up[1];
  backtrace(warm_up, 1);  // loads libgcc's unwinder now, not inside the handler
  stack_t stack{};
  stack.ss_sp = alternate_stack;
  stack.ss_size = sizeof(alternate_stack);
  if (sigaltstack(&stack, nullptr) != 0) return -1;
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = on_fatal;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int signal_number : kSignals) {
    if (sigaction(signal_number, &action, nullptr) != 0) return -1;
  }
  return 0;
}
