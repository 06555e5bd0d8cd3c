// Work sharing for the provider's split plans: `run(tasks, fn)` hands task indices out one at a
// time to the calling thread and to `size() - 1` workers; whoever is free takes the next one.
//
// Why not oneDNN's own OpenMP team: OpenMP splits a primitive statically, so on these shared
// 2-core machines a team member the OS deschedules stalls the whole op (measured 3-44x slower
// with other processes running). Here a descheduled worker delays at most the one task it holds;
// the caller takes every task nobody else claims, so a loaded machine degrades towards one thread
// instead of collapsing. oneDNN itself runs single-threaded inside each task.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
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
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task, worker) once for every task in [0, tasks); worker is 0 for the caller and
  // 1..size()-1 for the pool's threads (an index for per-thread scratch memory). Returns when
  // every task has finished; rethrows the first exception a task threw. One run at a time.
  void run(size_t tasks, const std::function<void(size_t task, int worker)>& fn);

 private:
  void worker_main(int worker);
  // Claims and runs tasks of the current job until none is left; `lock` is held on entry/exit.
  void work(std::unique_lock<std::mutex>& lock, int worker);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;      // workers wait for a new job
  std::condition_variable finished_;  // the caller waits for the last task
  // Written under mutex_; atomic so waiters can spin on them without taking the lock.
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> done_{0};
  bool stop_ = false;
  const std::function<void(size_t, int)>* job_ = nullptr;
  size_t tasks_ = 0;
  size_t next_ = 0;
  std::exception_ptr error_;
};

}  // namespace onednn
}  // namespace et_cpu_plugin
