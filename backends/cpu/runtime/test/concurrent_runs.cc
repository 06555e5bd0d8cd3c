// concurrent_runs: threads x programs x calls, run to completion and to process exit (issue 43).
//
//   concurrent_runs [--threads T] [--calls C] [--min-task-flops F] [--json] PROGRAM.pte...
//
// Each program first runs once on its own (the reference outputs). Then T threads start at once;
// thread t loads its own module of program t % P (as a server does: one loaded method per
// thread) and calls it C times on the same inputs, and every output must equal the reference
// byte for byte. Prints the total calls per second. --min-task-flops sets ET_CPU_ONEDNN_TASK_FLOPS
// (1: split every op it can into pieces on the shared work pool, as large models do). Exit 0: every call ran and matched; 1: a
// mismatch or a failed call; 2: bad command line. Built with --config=asan or --config=tsan it
// is the sanitizer stress test (targets.bzl), and the process exit is part of the test.
// First, the work pool alone: a job posted after a pause (the worker spinning, napping or
// blocked, work_pool.cc) must still reach its worker.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <executorch/extension/module/module.h>
#include <executorch/runtime/platform/runtime.h>

#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"
#include "tools/runner/tensor_io.h"

namespace {

using executorch::extension::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;

constexpr uint64_t kSeed = 0;
constexpr const char* kMethod = "forward";

struct Options {
  int threads = 4;
  int calls = 20;
  bool json = false;
  std::string min_task_flops;  // empty: the environment's
  std::vector<std::string> programs;
};

// Every output's bytes, in order.
using Outputs = std::vector<std::vector<uint8_t>>;

// A module of `path` with its inputs (seeded: every thread's are equal).
struct Loaded {
  std::unique_ptr<Module> module;
  std::vector<et_cpu_runner::Input> inputs;
  std::vector<EValue> values;
};

bool load(const std::string& path, Loaded& out, std::string& error) {
  out.module = std::make_unique<Module>(path, Module::LoadMode::Mmap);
  if (out.module->load_method(kMethod) != Error::Ok) {
    error = path + ": loading method 'forward' failed";
    return false;
  }
  auto meta = out.module->method_meta(kMethod);
  if (!meta.ok()) {
    error = path + ": no method meta";
    return false;
  }
  out.inputs.resize(meta->num_inputs());
  for (size_t i = 0; i < out.inputs.size(); ++i) {
    if (!et_cpu_runner::make_input(*meta, i, "", kSeed, out.inputs[i], error)) return false;
    out.values.emplace_back(*out.inputs[i].tensor);
  }
  return true;
}

bool call(Loaded& loaded, Outputs& outputs, std::string& error) {
  auto results = loaded.module->execute(kMethod, loaded.values);
  if (!results.ok()) {
    error = "execute failed with error " + std::to_string(static_cast<int>(results.error()));
    return false;
  }
  outputs.clear();
  for (const EValue& value : *results) {
    if (!value.isTensor()) {
      error = "an output is not a tensor";
      return false;
    }
    const auto& tensor = value.toTensor();
    const auto* bytes = static_cast<const uint8_t*>(tensor.const_data_ptr());
    outputs.emplace_back(bytes, bytes + tensor.nbytes());
  }
  return true;
}

bool parse(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--threads" || arg == "--calls") && i + 1 < argc) {
      const int value = std::atoi(argv[++i]);
      if (value < 1) return false;
      (arg == "--threads" ? options.threads : options.calls) = value;
    } else if (arg == "--min-task-flops" && i + 1 < argc) {
      options.min_task_flops = argv[++i];
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg.rfind("--", 0) == 0) {
      return false;
    } else {
      options.programs.push_back(arg);
    }
  }
  return !options.programs.empty();
}

// A 2-thread pool's job after pauses of 0, 5 (a worker napping between jobs) and 40 ms (blocked
// on its condition variable), alone and inside hold()/release(): each of the job's two tasks
// waits (at most 2 s) for the other to start, so it passes only when the worker took one while
// the caller ran the other. An empty string when every job did; else what failed.
std::string pool_reaches_worker_after_pauses() {
  et_cpu_plugin::onednn::WorkPool pool(2);
  for (const int pause_ms : {0, 5, 40}) {
    for (const bool held : {false, true}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      if (held) pool.hold();
      std::atomic<int> started{0};
      std::atomic<int> workers_seen{0};
      std::atomic<bool> together{true};
      pool.run(2, [&](size_t, int worker) {
        started.fetch_add(1);
        if (worker != 0) workers_seen.fetch_add(1);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (started.load() < 2) {
          if (std::chrono::steady_clock::now() > until) {
            together.store(false);
            return;
          }
          std::this_thread::yield();
        }
      });
      if (held) pool.release();
      if (!together.load() || workers_seen.load() != 1) {
        return "after a " + std::to_string(pause_ms) + " ms pause" + (held ? " (held)" : "") +
               ", the pool's worker did not take a task of the job";
      }
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) {
    std::fprintf(stderr,
                 "usage: concurrent_runs [--threads T] [--calls C] [--min-task-flops F] [--json] "
                 "PROGRAM.pte...\n");
    return 2;
  }
  if (!options.min_task_flops.empty()) {
    setenv("ET_CPU_ONEDNN_TASK_FLOPS", options.min_task_flops.c_str(), 1);  // before any init
  }
  const std::string pool_failure = pool_reaches_worker_after_pauses();
  if (!pool_failure.empty()) {
    std::fprintf(stderr, "concurrent_runs: work pool: %s\n", pool_failure.c_str());
    return 1;
  }
  executorch::runtime::runtime_init();
  const size_t num_programs = options.programs.size();
  std::vector<Outputs> expected(num_programs);
  for (size_t p = 0; p < num_programs; ++p) {
    Loaded loaded;
    std::string error;
    if (!load(options.programs[p], loaded, error) || !call(loaded, expected[p], error)) {
      std::fprintf(stderr, "concurrent_runs: %s: %s\n", options.programs[p].c_str(),
                   error.c_str());
      return 1;
    }
  }

  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<int> mismatches{0};
  std::atomic<int> failures{0};
  std::vector<std::string> errors(static_cast<size_t>(options.threads));
  std::vector<std::thread> threads;
  auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < options.threads; ++t) {
    threads.emplace_back([&, t] {
      const size_t program = static_cast<size_t>(t) % num_programs;
      Loaded loaded;
      std::string& error = errors[static_cast<size_t>(t)];
      const bool loaded_ok = load(options.programs[program], loaded, error);
      // Loads overlap too, then every thread calls at once.
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      if (!loaded_ok) {
        failures.fetch_add(1);
        return;
      }
      Outputs outputs;
      for (int c = 0; c < options.calls; ++c) {
        if (!call(loaded, outputs, error)) {
          failures.fetch_add(1);
          return;
        }
        if (outputs != expected[program]) mismatches.fetch_add(1);
      }
    });
  }
  while (ready.load() < options.threads) std::this_thread::yield();
  start = std::chrono::steady_clock::now();
  go.store(true);
  for (std::thread& thread : threads) thread.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int total = options.threads * options.calls;
  const double per_second = seconds > 0 ? total / seconds : 0.0;
  for (int t = 0; t < options.threads; ++t) {
    if (!errors[static_cast<size_t>(t)].empty()) {
      std::fprintf(stderr, "concurrent_runs: thread %d: %s\n", t,
                   errors[static_cast<size_t>(t)].c_str());
    }
  }
  if (options.json) {
    std::printf(
        "{\"threads\": %d, \"programs\": %zu, \"calls\": %d, \"seconds\": %.6f, "
        "\"calls_per_second\": %.3f, \"mismatches\": %d, \"failures\": %d}\n",
        options.threads, num_programs, total, seconds, per_second, mismatches.load(),
        failures.load());
  } else {
    std::printf("%d threads over %zu programs: %d calls in %.3f s (%.1f calls/s); %d mismatches, "
                "%d failed\n",
                options.threads, num_programs, total, seconds, per_second, mismatches.load(),
                failures.load());
  }
  return mismatches.load() == 0 && failures.load() == 0 ? 0 : 1;
}
