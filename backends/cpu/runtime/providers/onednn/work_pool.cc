#include "backends/cpu/runtime/providers/onednn/work_pool.h"

#include <omp.h>
#include <sched.h>

namespace et_cpu_plugin {
namespace onednn {
namespace {

// How a thread waits for `ready()` before blocking on a condition variable: ops follow each
// other within microseconds and a futex sleep/wake round trip costs more than most pieces take,
// so first spin briefly (~50 us), then yield the CPU a while (free when the core is idle; when
// it is not, whoever else wants it, often the other pool thread, runs instead of our spinning).
constexpr int kPauses = 1000;
constexpr int kYields = 200;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

template <typename Ready>
bool wait_briefly(Ready ready) {
  for (int i = 0; i < kPauses; ++i) {
    if (ready()) return true;
    cpu_relax();
  }
  for (int i = 0; i < kYields; ++i) {
    if (ready()) return true;
    sched_yield();
  }
  return ready();
}

}  // namespace

WorkPool::WorkPool(int threads) {
  for (int worker = 1; worker < threads; ++worker) {
    workers_.emplace_back([this, worker] { worker_main(worker); });
  }
}

WorkPool::~WorkPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (std::thread& thread : workers_) thread.join();
}

void WorkPool::work(std::unique_lock<std::mutex>& lock, int worker) {
  while (next_ < tasks_) {
    const size_t task = next_++;
    const auto* job = job_;
    lock.unlock();
    try {
      (*job)(task, worker);
    } catch (...) {
      std::lock_guard<std::mutex> error_lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    lock.lock();
    if (done_.fetch_add(1) + 1 == tasks_) finished_.notify_one();
  }
}

void WorkPool::worker_main(int worker) {
  // oneDNN (OpenMP build) sizes its parallel regions from this thread's OpenMP setting: one
  // thread per task, so it never starts a team of its own here.
  omp_set_num_threads(1);
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (generation_.load() == seen) {
      lock.unlock();
      wait_briefly([&] { return generation_.load(std::memory_order_acquire) != seen; });
      lock.lock();
      wake_.wait(lock, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load();
    if (stop_) return;
    work(lock, worker);
  }
}

void WorkPool::run(size_t tasks, const std::function<void(size_t, int)>& fn) {
  if (tasks == 0) return;
  if (workers_.empty() || tasks == 1) {
    for (size_t task = 0; task < tasks; ++task) fn(task, 0);
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  tasks_ = tasks;
  next_ = 0;
  done_.store(0);
  error_ = nullptr;
  generation_.fetch_add(1, std::memory_order_release);
  lock.unlock();
  wake_.notify_all();
  lock.lock();
  work(lock, 0);
  if (done_.load() != tasks_) {
    // A worker still holds a task: spin briefly (it is usually about to finish), then sleep.
    lock.unlock();
    wait_briefly([&] { return done_.load(std::memory_order_acquire) == tasks; });
    lock.lock();
    finished_.wait(lock, [&] { return done_.load() == tasks_; });
  }
  job_ = nullptr;
  std::exception_ptr error = error_;
  error_ = nullptr;
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

}  // namespace onednn
}  // namespace et_cpu_plugin
