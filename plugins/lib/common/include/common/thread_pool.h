#pragma once
// A small fork-join thread pool for CPU plugins: parallel_for(n, fn) runs
// fn(item, worker) for every item in [0, n) on the pool's threads plus the
// calling thread, and returns when all items are done. Items are handed out
// one at a time through an atomic counter, so uneven items balance themselves.
// `worker` is in [0, size()) and lets the caller keep per-thread scratch.
// Header-only: each plugin compiles its own copy (plugins share no symbols).

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <type_traits>
#include <utility>
#include <mutex>
#include <thread>
#include <vector>

namespace pagedllm::plugins {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: 1 runs everything inline.
  explicit ThreadPool(int num_threads) {
    const int extra = std::max(0, num_threads - 1);
    workers_.reserve(static_cast<std::size_t>(extra));
    for (int i = 0; i < extra; ++i) workers_.emplace_back([this, i] { worker_loop(i + 1); });
  }

  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Not reentrant: one parallel_for at a time, from one thread. The first
  // exception an item throws is rethrown here once every item has finished.
  template <class Fn>
  void parallel_for(std::int64_t n, Fn&& fn) {
    if (workers_.empty() || n <= 1) {
      for (std::int64_t i = 0; i < n; ++i) fn(i, 0);
      return;
    }
    using F = std::remove_reference_t<Fn>;
    auto call = [](void* f, std::int64_t item, int worker) { (*static_cast<F*>(f))(item, worker); };
    {
      std::lock_guard lock(mutex_);
      job_ = const_cast<void*>(static_cast<const void*>(std::addressof(fn)));
      job_call_ = call;
      job_size_ = n;
      next_.store(0, std::memory_order_relaxed);
      busy_ = static_cast<int>(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    run_items(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void worker_loop(int worker) {
    std::uint64_t seen = 0;
    for (;;) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      lock.unlock();
      run_items(worker);
      lock.lock();
      if (--busy_ == 0) done_.notify_one();
    }
  }

  void run_items(int worker) {
    for (;;) {
      const std::int64_t item = next_.fetch_add(1, std::memory_order_relaxed);
      if (item >= job_size_) return;
      try {
        job_call_(job_, item, worker);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  bool stop_ = false;
  std::uint64_t generation_ = 0;
  int busy_ = 0;
  void* job_ = nullptr;
  void (*job_call_)(void*, std::int64_t, int) = nullptr;
  std::int64_t job_size_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::exception_ptr error_;
};

// The number of threads `requested` means: 0 = one per hardware thread.
inline int resolve_num_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

}  // namespace pagedllm::plugins
