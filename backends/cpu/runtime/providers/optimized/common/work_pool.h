// Work sharing for the provider's split plans: `run(tasks, fn)` shares task indices between the
// calling thread and `size() - 1` workers. Each thread first claims its own contiguous share
// (thread t of T: tasks [t*n/T, (t+1)*n/T)), then steals what is left of the others' shares from
// their far end. Consecutive ops split alike (row bands), so a thread keeps reading the rows it
// wrote into its own core's cache, as a static schedule would, while a late or descheduled
// thread still only delays the tasks it actually holds.
//
// Why not oneDNN's own OpenMP team: OpenMP splits a primitive statically, so on these shared
// 2-core machines a team member the OS deschedules stalls the whole op (measured 3-44x slower
// with other processes running). Here a descheduled worker delays at most the one task it holds;
// the caller takes every task nobody else claims, so a loaded machine degrades towards one thread
// instead of collapsing. oneDNN itself runs single-threaded inside each task.
//
// One pool per process and size (`shared`), not one per delegate: a server whose N threads each
// run their own program would otherwise start N pools, N x (threads - 1) workers spinning for
// the same cores. Callers take turns: a `run` that finds the pool busy with another caller's op
// runs its tasks on its own thread instead of waiting (the pool's threads are busy anyway), so
// N callers use at most N + threads - 1 threads, and none waits for another.
//
// Between jobs a worker spins briefly, then (ET_CPU_POOL_POLL, on unless "0") naps in 40 us
// timed sleeps for up to 50 ms, then blocks on a condition variable; a caller makes a futex wake
// only for a blocked worker (on a VM that wake costs the caller ~35 us; work_pool.cc).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace et_cpu_plugin {
namespace onednn {

class WorkPool {
 public:
  // `threads` counts the caller: threads - 1 workers are started (none for 1).
  explicit WorkPool(int threads);
  ~WorkPool();
  // The process's pool of `threads` threads, started on first use and stopped when its last
  // holder lets go.
  static std::shared_ptr<WorkPool> shared(int threads);
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task, worker) once for every task in [0, tasks); worker is 0 for the caller and
  // 1..size()-1 for the pool's threads (an index for per-thread scratch memory). Returns when
  // every task has finished; rethrows the first exception a task threw. Any thread may call it:
  // while another caller's run holds the pool, every task runs on the calling thread (worker 0).
  void run(size_t tasks, const std::function<void(size_t task, int worker)>& fn);

  // A caller about to run a series of jobs (a graph's call: ops back to back, some too small to
  // split) holds the pool for its duration: its workers wake now, and between jobs they keep
  // spinning (yielding the CPU to anyone who wants it) instead of sleeping, so no job waits for
  // a sleeping worker's wake-up. Holds nest and may come from several callers; each hold() needs
  // its release().
  void hold();
  void release();
  // Wakes the workers blocked on the condition variable (none were given a job for kNapWindow,
  // work_pool.cc), without holding the pool: they wait briefly and nap as after a job. A call
  // after time away makes this futex wake at its start, so a worker is up by its first split op
  // instead of joining that op late (ET_CPU_POOL_WAKE, session.h). Free when none is blocked.
  void wake();

 private:
  void worker_main(int worker);
  // Claims and runs tasks of the current job (own share first, then steals) until none is left.
  void work(const std::function<void(size_t, int)>& job, size_t tasks, int worker);
  // Marks task `task` taken; false when another thread took it first.
  bool claim(size_t task) { return claimed_[task].exchange(1, std::memory_order_acq_rel) == 0; }

  std::vector<std::thread> workers_;
  std::mutex caller_;  // held by the caller whose run has the pool's threads
  std::mutex mutex_;
  std::condition_variable wake_;      // workers wait for a new job
  std::condition_variable finished_;  // the caller waits for the last task and the last worker
  // Written under mutex_; atomic so waiters can spin on them without taking the lock.
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> done_{0};
  // Workers inside the current job: the caller resets `claimed_` for the next job only when no
  // worker can still be claiming from the last one.
  std::atomic<int> active_{0};
  std::atomic<int> holds_{0};  // hold() minus release(): workers do not sleep while positive
  // Workers blocked on `wake_` (guarded by mutex_): a new job or hold notifies only if some are;
  // the others (spinning, yielding or napping, work_pool.cc) see the generation change themselves.
  int sleeping_ = 0;
  bool stop_ = false;
  const std::function<void(size_t, int)>* job_ = nullptr;  // null between jobs
  size_t tasks_ = 0;
  std::vector<std::atomic<uint8_t>> claimed_;  // per task: 1 once a thread took it
  std::exception_ptr error_;
};

// fn(task, worker) for every task in [0, tasks): on `pool`, or in order on the calling thread
// (worker 0) when there is no pool or a single task.
inline void run_tasks(WorkPool* pool, size_t tasks,
                      const std::function<void(size_t task, int worker)>& fn) {
  if (tasks == 1 || pool == nullptr) {
    for (size_t t = 0; t < tasks; ++t) fn(t, 0);
  } else {
    pool->run(tasks, fn);
  }
}

}  // namespace onednn
}  // namespace et_cpu_plugin
