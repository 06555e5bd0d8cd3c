// The work-sharing pool: worker threads, task claiming and waiting (the design is in work_pool.h).
#include "backends/cpu/runtime/providers/optimized/common/work_pool.h"

#include <omp.h>
#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <thread>

#include "backends/cpu/runtime/providers/optimized/common/switches.h"

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

// A worker's extra wait for the next job before it sleeps, in microseconds:
// $ET_CPU_POOL_SPIN_US (0 to 100000), default 0 (the brief wait above only). A transformer's
// products come between runs of small unsplit ops (rotary, norms) that take longer than the brief
// wait, so a sleeping worker's wake-up can cost a product its second thread (issue 45). Read once.
int64_t worker_spin_us() {
  static const int64_t spin = onednn::switch_number("ET_CPU_POOL_SPIN_US", 0, 0, 100000);
  return spin;
}

// After its brief wait, a worker naps in short timed sleeps for a while before it blocks on the
// condition variable (ET_CPU_POOL_POLL, on unless "0", read when the pool starts). A caller that
// finds every worker napping only publishes its job: it makes no futex wake. On these VMs that
// wake costs the caller ~35 us when the other vCPU is idle (likely the hypervisor's cross-vCPU
// interrupt: `hold()`'s notify measured at 36.5 us median, the worker running ~60 us after it),
// once per call back to back; a napping worker sees the job within one nap instead and the
// caller pays nothing. After kNapWindow without a job the worker blocks as before, so an idle
// process does not wake every few tens of microseconds for long.
constexpr auto kNap = std::chrono::microseconds(40);
constexpr auto kNapWindow = std::chrono::milliseconds(50);

bool naps_between_jobs() {
  static const bool naps = onednn::kernel_switched_on("ET_CPU_POOL_POLL");
  return naps;
}

template <typename Ready>
bool wait_briefly(Ready ready, int64_t extra_us = 0) {
  for (int i = 0; i < kPauses; ++i) {
    if (ready()) return true;
    cpu_relax();
  }
  for (int i = 0; i < kYields; ++i) {
    if (ready()) return true;
    sched_yield();
  }
  if (extra_us > 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(extra_us);
    while (std::chrono::steady_clock::now() < until) {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return true;
        cpu_relax();
      }
      sched_yield();
    }
  }
  return ready();
}

}  // namespace

std::shared_ptr<WorkPool> WorkPool::shared(int threads) {
  static std::mutex mutex;
  static std::map<int, std::weak_ptr<WorkPool>>* pools = new std::map<int, std::weak_ptr<WorkPool>>;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<WorkPool> pool = (*pools)[threads].lock();
  if (pool == nullptr) {
    pool = std::make_shared<WorkPool>(threads);
    (*pools)[threads] = pool;
  }
  return pool;
}

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

void WorkPool::work(const std::function<void(size_t, int)>& job, size_t tasks, int worker) {
  const size_t threads = static_cast<size_t>(size());
  const size_t self = static_cast<size_t>(worker);
  auto run_task = [&](size_t task) {
    try {
      job(task, worker);
    } catch (...) {
      std::lock_guard<std::mutex> error_lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == tasks) {
      std::lock_guard<std::mutex> lock(mutex_);  // the caller may be about to sleep on it
      finished_.notify_one();
    }
  };
  // Own share, front to back.
  for (size_t task = self * tasks / threads; task < (self + 1) * tasks / threads; ++task) {
    if (claim(task)) run_task(task);
  }
  // Then the others' shares, each from its far end (its owner works from the front).
  for (size_t step = 1; step < threads; ++step) {
    const size_t other = (self + step) % threads;
    const size_t begin = other * tasks / threads;
    for (size_t task = (other + 1) * tasks / threads; task-- > begin;) {
      if (claim(task)) run_task(task);
    }
  }
}

void WorkPool::worker_main(int worker) {
  // oneDNN (OpenMP build) sizes its parallel regions from this thread's OpenMP setting: one
  // thread per task, so it never starts a team of its own here.
  omp_set_num_threads(1);
  const bool naps = naps_between_jobs();
  // Naps end on time (the default slack of 50 us would double a 40 us nap).
  if (naps) prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (generation_.load() == seen) {
      lock.unlock();
      const auto ready = [&] { return generation_.load(std::memory_order_acquire) != seen; };
      // While a caller holds the pool, wait in brief rounds instead of sleeping.
      bool woke = false;
      while (!(woke = wait_briefly(ready, worker_spin_us())) &&
             holds_.load(std::memory_order_acquire) > 0) {
      }
      // Then nap (not counted in sleeping_: a caller need not wake it) until the window ends.
      if (!woke && naps) {
        const auto until = std::chrono::steady_clock::now() + kNapWindow;
        while (!ready() && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(kNap);
        }
      }
      lock.lock();
      ++sleeping_;
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      --sleeping_;
    }
    seen = generation_.load();
    if (stop_) return;
    if (job_ == nullptr) continue;  // woke after that job had already finished
    const auto* job = job_;
    const size_t tasks = tasks_;
    active_.fetch_add(1);
    lock.unlock();
    work(*job, tasks, worker);
    lock.lock();
    if (active_.fetch_sub(1) == 1) finished_.notify_one();
  }
}

void WorkPool::hold() {
  if (workers_.empty()) return;
  if (holds_.fetch_add(1, std::memory_order_acq_rel) > 0) return;  // already awake
  // A new generation without a job wakes sleeping workers; they find no job and wait again,
  // spinning now that the pool is held. Taken only when no job is in flight, so none joins late.
  std::unique_lock<std::mutex> turn(caller_, std::try_to_lock);
  if (!turn.owns_lock()) return;  // another caller's job is running: its workers are awake
  bool sleepers = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
    sleepers = sleeping_ > 0;
  }
  if (sleepers) wake_.notify_all();
}

void WorkPool::wake() {
  if (workers_.empty()) return;
  std::unique_lock<std::mutex> turn(caller_, std::try_to_lock);
  if (!turn.owns_lock()) return;  // another caller's job is running: its workers are awake
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (sleeping_ == 0) return;
    generation_.fetch_add(1, std::memory_order_release);  // no job: they find none, then nap
  }
  wake_.notify_all();
}

void WorkPool::release() {
  if (workers_.empty()) return;
  holds_.fetch_sub(1, std::memory_order_acq_rel);
}

void WorkPool::run(size_t tasks, const std::function<void(size_t, int)>& fn) {
  if (tasks == 0) return;
  std::unique_lock<std::mutex> turn(caller_, std::defer_lock);
  if (workers_.empty() || tasks == 1 || !turn.try_lock()) {
    for (size_t task = 0; task < tasks; ++task) fn(task, 0);
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (claimed_.size() < tasks) claimed_ = std::vector<std::atomic<uint8_t>>(tasks);
  for (size_t task = 0; task < tasks; ++task) claimed_[task].store(0, std::memory_order_relaxed);
  job_ = &fn;
  tasks_ = tasks;
  done_.store(0);
  error_ = nullptr;
  generation_.fetch_add(1, std::memory_order_release);
  const bool sleepers = sleeping_ > 0;  // the others (waiting briefly, napping) see it themselves
  lock.unlock();
  if (sleepers) wake_.notify_all();
  work(fn, tasks, 0);
  auto finished = [&] {
    return done_.load(std::memory_order_acquire) == tasks &&
           active_.load(std::memory_order_acquire) == 0;
  };
  // A worker may still hold a task, or be leaving the job: spin briefly (it is usually about to
  // finish), then sleep. The job closes under the lock, so no worker joins it late.
  wait_briefly(finished);
  lock.lock();
  finished_.wait(lock, finished);
  job_ = nullptr;
  std::exception_ptr error = error_;
  error_ = nullptr;
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

}  // namespace onednn
}  // namespace et_cpu_plugin
