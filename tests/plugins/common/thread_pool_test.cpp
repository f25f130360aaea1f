// plugins/lib/common's fork-join pool (common/thread_pool.h): every item runs
// exactly once, on a worker index in range, whether hand-offs spin or sleep,
// whether or not the workers get to join a job; exceptions come back once.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/thread_pool.h"

namespace {

using pagedllm::plugins::ThreadPool;
using std::chrono::microseconds;

// Runs `calls` jobs of up to 64 items back to back; checks each item ran once.
void run_jobs(ThreadPool& pool, int calls) {
  for (int call = 0; call < calls; ++call) {
    const std::int64_t n = 1 + call % 64;
    std::vector<std::atomic<int>> runs(static_cast<std::size_t>(n));
    std::atomic<bool> worker_in_range{true};
    pool.parallel_for(n, [&](std::int64_t item, int worker) {
      runs[static_cast<std::size_t>(item)].fetch_add(1);
      if (worker < 0 || worker >= pool.size()) worker_in_range = false;
    });
    for (std::int64_t i = 0; i < n; ++i) REQUIRE(runs[static_cast<std::size_t>(i)].load() == 1);
    REQUIRE(worker_in_range);
  }
}

}  // namespace

TEST_CASE("thread pool: every item once, spinning, sleeping or in between", "[thread_pool]") {
  // 0: every hand-off sleeps; 1 us: most spins run out (both paths, and their races);
  // 1 s: nothing ever sleeps while jobs keep coming.
  for (const auto spin : {microseconds(0), microseconds(1), microseconds(1000000)}) {
    for (const int threads : {1, 2, 4}) {
      CAPTURE(spin.count(), threads);
      ThreadPool pool(threads, spin);
      REQUIRE(pool.size() == threads);
      run_jobs(pool, 2000);
    }
  }
}

TEST_CASE("thread pool: workers that sleep between jobs are woken", "[thread_pool]") {
  ThreadPool pool(3, microseconds(10));
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // past the spin: the workers sleep
    std::atomic<int> sum{0};
    std::vector<std::atomic<int>> by_worker(3);
    // Items long enough that the caller cannot take them all before a woken worker joins.
    pool.parallel_for(30, [&](std::int64_t item, int worker) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      sum += static_cast<int>(item);
      by_worker[static_cast<std::size_t>(worker)]++;
    });
    REQUIRE(sum == 30 * 29 / 2);
    if (round == 19) {
      int helpers = 0;
      for (int w = 1; w < 3; ++w) helpers += by_worker[static_cast<std::size_t>(w)] > 0;
      CHECK(helpers > 0);  // 3 ms of items: a woken worker took some
    }
  }
}

TEST_CASE("thread pool: the first exception is rethrown after every item ran", "[thread_pool]") {
  for (const auto spin : {microseconds(0), microseconds(100)}) {
    ThreadPool pool(2, spin);
    std::atomic<int> ran{0};
    REQUIRE_THROWS_WITH(pool.parallel_for(16,
                                          [&](std::int64_t item, int) {
                                            ++ran;
                                            if (item == 3) throw std::runtime_error("item 3");
                                          }),
                        "item 3");
    REQUIRE(ran == 16);
    run_jobs(pool, 10);  // the pool still works
  }
}

TEST_CASE("thread pool: the spin comes from PAGEDLLM_POOL_SPIN_US", "[thread_pool]") {
  using pagedllm::plugins::kDefaultPoolSpinMicros;
  using pagedllm::plugins::pool_spin_from_environment;
  const char* saved = std::getenv("PAGEDLLM_POOL_SPIN_US");
  const std::string restore = saved ? saved : "";
  ::unsetenv("PAGEDLLM_POOL_SPIN_US");
  CHECK(pool_spin_from_environment() == microseconds(kDefaultPoolSpinMicros));
  ::setenv("PAGEDLLM_POOL_SPIN_US", "0", 1);
  CHECK(pool_spin_from_environment() == microseconds(0));
  ::setenv("PAGEDLLM_POOL_SPIN_US", "250", 1);
  CHECK(pool_spin_from_environment() == microseconds(250));
  for (const char* bad : {"fast", "-1", "12us", "2000000"}) {
    ::setenv("PAGEDLLM_POOL_SPIN_US", bad, 1);
    CHECK_THROWS_WITH(pool_spin_from_environment(), Catch::Contains("PAGEDLLM_POOL_SPIN_US") && Catch::Contains(bad));
  }
  if (saved) {
    ::setenv("PAGEDLLM_POOL_SPIN_US", restore.c_str(), 1);
  } else {
    ::unsetenv("PAGEDLLM_POOL_SPIN_US");
  }
}
