#pragma once
// A small fork-join thread pool for CPU plugins: parallel_for(n, fn) runs
// fn(item, worker) for every item in [0, n) on the pool's threads plus the
// calling thread, and returns when all items are done. Items are handed out
// one at a time through an atomic counter, so uneven items balance themselves.
// `worker` is in [0, size()) and lets the caller keep per-thread scratch.
// Header-only: each plugin compiles its own copy (plugins share no symbols).
//
// Hand-offs spin before they sleep while jobs are short. A decode step of a small model is dozens
// of parallel_for calls a few microseconds apart; waking a sleeping thread
// through a futex (and putting the caller to sleep until the last item is
// done) cost more than the items themselves (docs/benchmarks.md, "Where a
// served decode step goes"). So a worker that finishes a short job watches for the
// next one for up to `spin` before it sleeps, and the caller watches for the
// last worker to finish for as long; a futex is touched only by a thread that
// really sleeps and by whoever must wake it. The spin is short and bounded:
// an idle pool sleeps, and between two engine steps (sampling, the server)
// the workers are usually asleep, so a step costs about one wake-up, not one
// per operation. After a long job (spin_budget()) nobody spins. A worker joins
// a job only while it is open, and the caller waits only for the workers that
// joined (parallel_for).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <mutex>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace pagedllm::plugins {

// How long a hand-off spins before it sleeps: PAGEDLLM_POOL_SPIN_US microseconds
// (0 = sleep at once, as before session 13; at most 1000000), by default
// kDefaultPoolSpinMicros. Anything else is refused (the plugin that builds a
// pool fails to start, naming the variable).
inline constexpr int kDefaultPoolSpinMicros = 50;

inline std::chrono::microseconds pool_spin_from_environment() {
  const char* value = std::getenv("PAGEDLLM_POOL_SPIN_US");
  if (value == nullptr || *value == '\0') return std::chrono::microseconds(kDefaultPoolSpinMicros);
  char* end = nullptr;
  errno = 0;
  const long micros = std::strtol(value, &end, 10);
  if (*end != '\0' || errno != 0 || micros < 0 || micros > 1000000) {
    throw std::invalid_argument(std::string("PAGEDLLM_POOL_SPIN_US must be a whole number of microseconds in [0, "
                                            "1000000], got '") +
                                value + "'");
  }
  return std::chrono::microseconds(micros);
}

// Polls `ready` until it returns true or `budget` has passed; true when it did.
// It pauses between polls and never yields the core: the polls are for
// hand-offs microseconds apart (ThreadPool::spin_budget()); a thread that
// would wait longer sleeps on the futex and is woken with the scheduler's
// preference for sleepers.
template <class Ready>
bool spin_until(std::chrono::microseconds budget, Ready&& ready) {
  if (budget.count() <= 0) return ready();
  constexpr int kPollsPerClockRead = 32;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (int polls = 1;; ++polls) {
    if (ready()) return true;
    if (polls % kPollsPerClockRead == 0 && std::chrono::steady_clock::now() >= deadline) return false;
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }
}

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: 1 runs everything inline.
  explicit ThreadPool(int num_threads, std::chrono::microseconds spin = pool_spin_from_environment())
      : spin_(spin) {
    const int extra = std::max(0, num_threads - 1);
    workers_.reserve(static_cast<std::size_t>(extra));
    for (int i = 0; i < extra; ++i) workers_.emplace_back([this, i] { worker_loop(i + 1); });
  }

  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Not reentrant: one parallel_for at a time, from one thread. The first
  // exception an item throws is rethrown here once every item has finished.
  //
  // A worker joins a job only while it is open; the caller closes it once it
  // has no item left to take, and then waits only for the workers that
  // joined. A worker that was asleep or descheduled (another process on the
  // core) is never waited for: the caller has run its items.
  template <class Fn>
  void parallel_for(std::int64_t n, Fn&& fn) {
    if (workers_.empty() || n <= 1) {
      for (std::int64_t i = 0; i < n; ++i) fn(i, 0);
      return;
    }
    using F = std::remove_reference_t<Fn>;
    auto call = [](void* f, std::int64_t item, int worker) { (*static_cast<F*>(f))(item, worker); };
    // No worker reads these until it has joined the new generation, and every
    // worker that joined the previous one finished before that call returned.
    job_ = const_cast<void*>(static_cast<const void*>(std::addressof(fn)));
    job_call_ = call;
    job_size_ = n;
    next_.store(0, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    const std::uint64_t generation = (state_.load(std::memory_order_relaxed) >> kGenerationShift) + 1;
    const auto started = std::chrono::steady_clock::now();
    state_.store(generation << kGenerationShift);  // seq_cst: ordered against a sleeper's count
    wake_sleepers();
    run_items(0);
    const std::uint64_t joined = state_.fetch_or(kClosed) & kJoinedMask;
    const auto all_finished = [&] { return finished_.load(std::memory_order_acquire) == joined; };
    if (!spin_until(spin_budget(), all_finished)) {
      std::unique_lock lock(mutex_);
      caller_sleeping_.store(true);
      done_.wait(lock, all_finished);
      caller_sleeping_.store(false);
    }
    short_jobs_.store(std::chrono::steady_clock::now() - started < kShortJob, std::memory_order_relaxed);
    job_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  // Spinning pays where jobs are short and come close together (a small model's decode step: dozens of jobs of
  // tens of microseconds). Between long jobs (a large model's layers, a prefill) a wake-up costs little next to
  // the job, and a thread that keeps polling loses, on a machine with more runnable threads than cores, the
  // scheduler's preference for threads that slept: the served decode of the 4-layer 1B-shape model was ~25 %
  // slower with polling threads at load 6-8 (docs/benchmarks.md). So a hand-off spins only while the last job
  // was short.
  static constexpr std::chrono::microseconds kShortJob{200};
  std::chrono::microseconds spin_budget() const {
    return short_jobs_.load(std::memory_order_relaxed) ? spin_ : std::chrono::microseconds(0);
  }

  // state_: the job's generation, whether it is closed, and how many workers joined it.
  static constexpr int kGenerationShift = 32;
  static constexpr std::uint64_t kClosed = std::uint64_t(1) << 31;
  static constexpr std::uint64_t kJoinedMask = kClosed - 1;

  // A worker counts itself in sleepers_ before it checks for a job under the
  // mutex; parallel_for posts the job before it reads sleepers_ (both
  // seq_cst), so either the worker sees the job or the caller sees the
  // sleeper and notifies it under the mutex.
  void wake_sleepers() {
    if (sleepers_.load() == 0) return;
    { std::lock_guard lock(mutex_); }
    wake_.notify_all();
  }

  // True when state `s` holds an open job newer than `seen`.
  static bool open_job(std::uint64_t s, std::uint64_t seen) {
    return (s >> kGenerationShift) != seen && (s & kClosed) == 0;
  }

  void worker_loop(int worker) {
    std::uint64_t seen = 0;  // the last generation this worker joined or found closed
    for (;;) {
      const auto job_or_stop = [&] {
        return stop_.load(std::memory_order_acquire) || open_job(state_.load(std::memory_order_acquire), seen);
      };
      if (!spin_until(spin_budget(), job_or_stop)) {
        std::unique_lock lock(mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return stop_.load() || open_job(state_.load(), seen); });
        sleepers_.fetch_sub(1);
      }
      if (stop_.load(std::memory_order_acquire)) return;
      std::uint64_t s = state_.load(std::memory_order_acquire);
      bool joined = false;
      while (open_job(s, seen) && !joined) {
        joined = state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire);
      }
      seen = s >> kGenerationShift;  // joined, or closed before this worker came: either way, done with it
      if (!joined) continue;
      run_items(worker);
      // The same pairing as wake_sleepers(), the other way round.
      finished_.fetch_add(1);
      if (caller_sleeping_.load()) {
        { std::lock_guard lock(mutex_); }
        done_.notify_one();
      }
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

  const std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> state_{0};
  std::atomic<std::uint64_t> finished_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> short_jobs_{true};  // the last job took less than kShortJob
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
