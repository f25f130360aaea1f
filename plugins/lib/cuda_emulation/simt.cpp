// The SIMT scheduler: kernels on the emulator's device thread, blocks in a
// seeded shuffled order, a block's threads as cooperative fibers (ucontext)
// that run until they reach a barrier or warp intrinsic or return. When no
// thread can run, the waiting warp operations whose lanes have all arrived
// complete, then the block barrier opens if every thread waits at the same
// __syncthreads; any other state is a divergence, reported with the kernel's
// name and the call sites instead of hanging.

#include <link.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emulation/launch_counters.h"
#include "internal.h"

#if defined(__x86_64__)
// A fiber switch without ucontext's signal-mask system calls: saves the
// callee-saved registers and the SSE/x87 control words on the current stack,
// stores the stack pointer in *from and continues on `to`'s stack.
extern "C" void pagedllm_emulation_switch(void** from, void* to);
// A new fiber's first return lands here: calls r13(r12) and never returns.
extern "C" void pagedllm_emulation_fiber_start();
asm(R"(
  .text
  .p2align 4
  .globl pagedllm_emulation_switch
  .hidden pagedllm_emulation_switch
  .type pagedllm_emulation_switch,@function
pagedllm_emulation_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size pagedllm_emulation_switch,.-pagedllm_emulation_switch

  .p2align 4
  .globl pagedllm_emulation_fiber_start
  .hidden pagedllm_emulation_fiber_start
  .type pagedllm_emulation_fiber_start,@function
pagedllm_emulation_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size pagedllm_emulation_fiber_start,.-pagedllm_emulation_fiber_start
)");
#endif

namespace pagedllm::cuda::emulation {

ThreadCoordinates coordinates{};

namespace {

constexpr int kWarpSize = 32;
constexpr uint64_t kMaxGridX = (uint64_t(1) << 31) - 1;
constexpr std::size_t kMaxSharedBytes = 48 * 1024;  // without cudaFuncSetAttribute's opt-in
#ifdef PAGEDLLM_EMULATION_ASAN
constexpr std::size_t kStackBytes = 512 * 1024;
#else
constexpr std::size_t kStackBytes = 128 * 1024;
#endif

bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

std::string site_name(const std::source_location& s) {
  // From the repository root: "plugins/..." or "tests/...".
  const char* file = s.file_name();
  for (const char* root : {"/tests/", "/plugins/"}) {
    if (const char* at = std::strstr(file, root)) {
      file = at + 1;
      break;
    }
  }
  return std::string(file) + ":" + std::to_string(s.line());
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::kShflIdx: return "__shfl_sync";
    case WarpOp::kShflUp: return "__shfl_up_sync";
    case WarpOp::kShflDown: return "__shfl_down_sync";
    case WarpOp::kShflXor: return "__shfl_xor_sync";
    case WarpOp::kBallot: return "__ballot_sync";
    case WarpOp::kAny: return "__any_sync";
    case WarpOp::kAll: return "__all_sync";
    case WarpOp::kSyncWarp: return "__syncwarp";
  }
  return "?";
}

#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};
inline void switch_context(Context* from, Context* to) { pagedllm_emulation_switch(&from->sp, to->sp); }
#else
using Context = ucontext_t;
inline void switch_context(Context* from, Context* to) { swapcontext(from, to); }
#endif

struct Fiber {
  Context context{};
  std::unique_ptr<std::byte[]> stack;
  void* fake_stack = nullptr;  // ASan's bookkeeping while switched away
  int thread = -1;             // the CUDA thread it runs, -1 when free
};

enum class State { kRunnable, kBarrier, kWarp, kDone };

struct ThreadState {
  State state = State::kRunnable;
  Fiber* fiber = nullptr;
  std::source_location site;
  WarpOp op = WarpOp::kSyncWarp;
  unsigned mask = 0;
  uint64_t value = 0;
  int arg = 0, width = kWarpSize;
  uint64_t result = 0;
};

// Where the kernel module's thread_local block lies on the device thread.
struct TlsRange {
  std::byte* zero_init = nullptr;  // .tbss: the static __shared__ variables
  std::size_t bytes = 0;
};

class Scheduler {
 public:
  // Runs one launch; returns an empty string or the failure.
  std::string run(const KernelLaunch& launch, uint64_t launch_number) {
    launch_ = &launch;
    error_.clear();
    const TlsRange shared = static_shared(launch);
    // The static size is not checked: the module's TLS block holds the
    // __shared__ variables of all its kernels, not of this one alone.
    if (launch.dynamic_shared_bytes > kMaxSharedBytes) {
      return "asks for " + std::to_string(launch.dynamic_shared_bytes) + " bytes of dynamic shared memory, over the " +
             std::to_string(kMaxSharedBytes) + " a block may have";
    }
    dynamic_shared_.assign(launch.dynamic_shared_bytes, std::byte{0xff});
    const uint64_t blocks = uint64_t(launch.grid.x) * launch.grid.y * launch.grid.z;
    order_.resize(blocks);
    std::iota(order_.begin(), order_.end(), uint64_t(0));
    std::mt19937_64 rng(seed() ^ (launch_number * 0x9e3779b97f4a7c15ull));
    std::shuffle(order_.begin(), order_.end(), rng);
    coordinates.block_dim = launch.block;
    coordinates.grid_dim = launch.grid;
    coordinates.dynamic_shared = dynamic_shared_.data();
    for (const uint64_t b : order_) {
      coordinates.block_idx = {unsigned(b % launch.grid.x), unsigned(b / launch.grid.x % launch.grid.y),
                               unsigned(b / (uint64_t(launch.grid.x) * launch.grid.y))};
      // Every block starts from garbage shared memory, as on a GPU: NaN in f32, f16 and bf16.
      if (shared.bytes) std::memset(shared.zero_init, 0xff, shared.bytes);
      std::fill(dynamic_shared_.begin(), dynamic_shared_.end(), std::byte{0xff});
      run_block();
      if (!error_.empty()) {
        discard_fibers();
        return "block (" + std::to_string(coordinates.block_idx.x) + "," + std::to_string(coordinates.block_idx.y) +
               "," + std::to_string(coordinates.block_idx.z) + "): " + error_;
      }
    }
    return {};
  }

  void sync_threads(std::source_location site) {
    ThreadState& t = current();
    t.state = State::kBarrier;
    t.site = site;
    yield(t);
  }

  uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, std::source_location site) {
    ThreadState& t = current();
    t.state = State::kWarp;
    t.op = op;
    t.mask = mask;
    t.value = value;
    t.arg = arg;
    t.width = width;
    t.site = site;
    yield(t);
    return t.result;
  }

  bool in_kernel() const { return current_ >= 0; }

 private:
  static uint64_t seed() {
    static const uint64_t s = [] {
      const char* env = std::getenv("PAGEDLLM_CUDA_EMULATION_SEED");
      return env ? std::strtoull(env, nullptr, 0) : uint64_t(0x5eed);
    }();
    return s;
  }

  // The kernel module's .tbss on this (the device) thread: the anchor, a
  // non-zero thread_local of that module, is in its .tdata, which the
  // PT_TLS segment's file image covers.
  TlsRange static_shared(const KernelLaunch& launch) {
    struct Search {
      const std::byte* anchor;
      TlsRange range;
    } search{static_cast<const std::byte*>(launch.module_tls_anchor()), {}};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
          auto* s = static_cast<Search*>(data);
          if (!info->dlpi_tls_data) return 0;
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_TLS) continue;
            auto* base = static_cast<std::byte*>(info->dlpi_tls_data);
            if (s->anchor >= base && s->anchor < base + ph.p_memsz) {
              s->range = {base + ph.p_filesz, std::size_t(ph.p_memsz - ph.p_filesz)};
              return 1;
            }
          }
          return 0;
        },
        &search);
    return search.range;
  }

  ThreadState& current() {
    if (current_ < 0) {
      std::fprintf(stderr, "pagedllm CUDA emulation: a barrier or warp intrinsic outside a kernel\n");
      std::abort();
    }
    return threads_[std::size_t(current_)];
  }

#if !defined(__x86_64__)
  static void fiber_entry(unsigned lo, unsigned hi) {
    fiber_main(reinterpret_cast<Scheduler*>((uintptr_t(hi) << 32) | uintptr_t(lo)));
  }
#endif

  static void fiber_main(Scheduler* self) {
#ifdef PAGEDLLM_EMULATION_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &self->main_stack_bottom_, &self->main_stack_size_);
#endif
    for (;;) {
      self->launch_->run_thread(self->launch_->context);
      ThreadState& t = self->threads_[std::size_t(self->current_)];
      t.state = State::kDone;
      self->yield(t);
    }
  }

  // Back to the scheduler; returns when the scheduler resumes this thread.
  void yield(ThreadState& t) {
    Fiber* f = t.fiber;
#ifdef PAGEDLLM_EMULATION_ASAN
    __sanitizer_start_switch_fiber(&f->fake_stack, main_stack_bottom_, main_stack_size_);
#endif
    switch_context(&f->context, &main_context_);
#ifdef PAGEDLLM_EMULATION_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, &main_stack_bottom_, &main_stack_size_);
#endif
  }

  Fiber* take_fiber() {
    if (free_fibers_.empty()) {
      auto f = std::make_unique<Fiber>();
      f->stack.reset(new std::byte[kStackBytes]);
#if defined(__x86_64__)
      // The frame pagedllm_emulation_switch pops: control words, r15, r14,
      // r13 (the entry), r12 (its argument), rbx, rbp, the return address.
      auto* top = reinterpret_cast<uint64_t*>((uintptr_t(f->stack.get()) + kStackBytes) & ~uintptr_t(15));
      uint64_t* sp = top - 8;
      uint32_t control[2];
      asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(control[0]), "=m"(control[1]));
      std::memcpy(&sp[0], control, sizeof control);
      sp[1] = 0;                                      // r15
      sp[2] = 0;                                      // r14
      sp[3] = uint64_t(uintptr_t(&fiber_main));       // r13
      sp[4] = uint64_t(uintptr_t(this));              // r12
      sp[5] = 0;                                      // rbx
      sp[6] = 0;                                      // rbp
      sp[7] = uint64_t(uintptr_t(&pagedllm_emulation_fiber_start));
      f->context.sp = sp;
#else
      getcontext(&f->context);
      f->context.uc_stack.ss_sp = f->stack.get();
      f->context.uc_stack.ss_size = kStackBytes;
      f->context.uc_link = nullptr;
      const auto self = uintptr_t(this);
      makecontext(&f->context, reinterpret_cast<void (*)()>(&fiber_entry), 2, unsigned(self & 0xffffffffu),
                  unsigned(self >> 32));
#endif
      free_fibers_.push_back(f.get());
      fibers_.push_back(std::move(f));
    }
    Fiber* f = free_fibers_.back();
    free_fibers_.pop_back();
    return f;
  }

  void resume(int index) {
    ThreadState& t = threads_[std::size_t(index)];
    if (!t.fiber) {
      t.fiber = take_fiber();
      t.fiber->thread = index;
    }
    const dim3& b = launch_->block;
    coordinates.thread_idx = {unsigned(index) % b.x, unsigned(index) / b.x % b.y, unsigned(index) / (b.x * b.y)};
    t.state = State::kRunnable;
    current_ = index;
#ifdef PAGEDLLM_EMULATION_ASAN
    __sanitizer_start_switch_fiber(&main_fake_stack_, t.fiber->stack.get(), kStackBytes);
#endif
    switch_context(&main_context_, &t.fiber->context);
#ifdef PAGEDLLM_EMULATION_ASAN
    __sanitizer_finish_switch_fiber(main_fake_stack_, nullptr, nullptr);
#endif
    current_ = -1;
    if (t.state == State::kDone) {
      t.fiber->thread = -1;
      free_fibers_.push_back(t.fiber);
      t.fiber = nullptr;
    }
  }

  void run_block() {
    const dim3& b = launch_->block;
    const int count = int(b.x * b.y * b.z);
    threads_.assign(std::size_t(count), ThreadState{});
    std::vector<bool> runnable(std::size_t(count), true);
    for (;;) {
      bool ran = false;
      for (int i = 0; i < count; ++i) {
        if (!runnable[std::size_t(i)]) continue;
        resume(i);
        runnable[std::size_t(i)] = false;
        ran = true;
      }
      (void)ran;
      // Every thread is now waiting or done.
      bool progress = false;
      const int warps = (count + kWarpSize - 1) / kWarpSize;
      for (int w = 0; w < warps && error_.empty(); ++w) progress |= complete_warp_ops(w, count, runnable);
      if (!error_.empty()) return;
      if (progress) continue;
      if (!open_barrier(count, runnable)) return;
      if (std::none_of(runnable.begin(), runnable.end(), [](bool r) { return r; })) return;  // all done
    }
  }

  std::string describe(int i) const {
    const dim3& b = launch_->block;
    const ThreadState& t = threads_[std::size_t(i)];
    std::string where = "thread (" + std::to_string(unsigned(i) % b.x) + "," + std::to_string(unsigned(i) / b.x % b.y) +
                        "," + std::to_string(unsigned(i) / (b.x * b.y)) + ")";
    switch (t.state) {
      case State::kDone: return where + " has returned";
      case State::kBarrier: return where + " waits at __syncthreads " + site_name(t.site);
      case State::kWarp: return where + " waits at " + op_name(t.op) + " " + site_name(t.site);
      case State::kRunnable: break;
    }
    return where + " runs";
  }

  // Completes the warp operations of warp `w` whose lanes have all arrived.
  bool complete_warp_ops(int w, int count, std::vector<bool>& runnable) {
    const int first = w * kWarpSize;
    const int lanes = std::min(kWarpSize, count - first);
    bool progress = false;
    for (int lane = 0; lane < lanes; ++lane) {
      const ThreadState& t = threads_[std::size_t(first + lane)];
      if (t.state != State::kWarp) continue;
      const unsigned mask = t.mask;
      if (!(mask >> lane & 1u)) {
        error_ = describe(first + lane) + " with mask 0x" + hex(mask) + ", which does not include the lane itself";
        return false;
      }
      if (t.width <= 0 || t.width > kWarpSize || (t.width & (t.width - 1)) != 0) {
        error_ = describe(first + lane) + " with width " + std::to_string(t.width) + " (a power of 2 up to 32)";
        return false;
      }
      // Every lane of the mask must be at the same operation.
      for (int other = 0; other < kWarpSize; ++other) {
        if (!(mask >> other & 1u)) continue;
        if (other >= lanes) {
          error_ = describe(first + lane) + " with mask 0x" + hex(mask) + ", which names lane " +
                   std::to_string(other) + " that the block does not have";
          return false;
        }
        const ThreadState& o = threads_[std::size_t(first + other)];
        if (o.state != State::kWarp || o.op != t.op || o.mask != mask || !same_site(o.site, t.site)) {
          error_ = "divergent " + std::string(op_name(t.op)) + " (mask 0x" + hex(mask) + "): " +
                   describe(first + lane) + " while " + describe(first + other);
          return false;
        }
      }
      if (!finish_group(first, mask)) return false;
      for (int other = 0; other < kWarpSize; ++other) {
        if (mask >> other & 1u) {
          threads_[std::size_t(first + other)].state = State::kRunnable;
          runnable[std::size_t(first + other)] = true;
        }
      }
      progress = true;
    }
    return progress;
  }

  static std::string hex(unsigned v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", v);
    return buf;
  }

  bool finish_group(int first, unsigned mask) {
    const ThreadState& lead = threads_[std::size_t(first + std::countr_zero(mask))];
    uint64_t ballot = 0;
    for (int lane = 0; lane < kWarpSize; ++lane) {
      if (mask >> lane & 1u && threads_[std::size_t(first + lane)].value != 0) ballot |= uint64_t(1) << lane;
    }
    for (int lane = 0; lane < kWarpSize; ++lane) {
      if (!(mask >> lane & 1u)) continue;
      ThreadState& t = threads_[std::size_t(first + lane)];
      const int start = lane / t.width * t.width, end = start + t.width;
      int source = lane;
      switch (lead.op) {
        case WarpOp::kShflIdx: source = start + ((t.arg % t.width) + t.width) % t.width; break;
        case WarpOp::kShflUp: source = lane - t.arg >= start ? lane - t.arg : lane; break;
        case WarpOp::kShflDown: source = lane + t.arg < end ? lane + t.arg : lane; break;
        case WarpOp::kShflXor: source = (lane ^ t.arg) < end ? (lane ^ t.arg) : lane; break;
        case WarpOp::kBallot: t.result = ballot; continue;
        case WarpOp::kAny: t.result = ballot != 0; continue;
        case WarpOp::kAll: t.result = ballot == (uint64_t(mask)); continue;
        case WarpOp::kSyncWarp: t.result = 0; continue;
      }
      if (source < 0 || source >= kWarpSize || !(mask >> source & 1u)) {
        error_ = describe(first + lane) + " reads lane " + std::to_string(source) + ", outside the mask 0x" + hex(mask);
        return false;
      }
      t.result = threads_[std::size_t(first + source)].value;
    }
    return true;
  }

  bool open_barrier(int count, std::vector<bool>& runnable) {
    int waiting = -1;
    for (int i = 0; i < count; ++i) {
      const ThreadState& t = threads_[std::size_t(i)];
      if (t.state == State::kDone) continue;
      if (t.state != State::kBarrier) {
        error_ = "no thread can run: " + describe(i);
        for (int j = 0; j < count; ++j) {
          if (j != i && threads_[std::size_t(j)].state != State::kWarp) {
            error_ += ", while " + describe(j);
            break;
          }
        }
        return false;
      }
      if (waiting < 0) waiting = i;
    }
    if (waiting < 0) return true;  // every thread returned
    const ThreadState& w = threads_[std::size_t(waiting)];
    for (int i = 0; i < count; ++i) {
      const ThreadState& t = threads_[std::size_t(i)];
      if (t.state == State::kDone ||
          (t.state == State::kBarrier && !same_site(t.site, w.site))) {
        error_ = "divergent __syncthreads: " + describe(waiting) + " while " + describe(i);
        return false;
      }
    }
    for (int i = 0; i < count; ++i) {
      threads_[std::size_t(i)].state = State::kRunnable;
      runnable[std::size_t(i)] = true;
    }
    return true;
  }

  // After a failed block the fibers in use hold the frames of abandoned
  // threads: drop them (their stacks' ASan state included).
  void discard_fibers() {
    std::vector<std::unique_ptr<Fiber>> kept;
    for (auto& f : fibers_) {
      if (f->thread < 0) {
        kept.push_back(std::move(f));
        continue;
      }
#ifdef PAGEDLLM_EMULATION_ASAN
      __asan_unpoison_memory_region(f->stack.get(), kStackBytes);
#endif
    }
    fibers_ = std::move(kept);
    free_fibers_.clear();
    for (auto& f : fibers_) free_fibers_.push_back(f.get());
    threads_.clear();
  }

  const KernelLaunch* launch_ = nullptr;
  std::vector<ThreadState> threads_;
  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::vector<Fiber*> free_fibers_;
  std::vector<uint64_t> order_;
  std::vector<std::byte> dynamic_shared_;
  Context main_context_{};
  void* main_fake_stack_ = nullptr;
  const void* main_stack_bottom_ = nullptr;
  std::size_t main_stack_size_ = 0;
  int current_ = -1;
  std::string error_;
};

// The thread every kernel runs on: its thread_local blocks hold the static
// shared memory of each kernel module, which no host thread then shares.
class DeviceThread {
 public:
  DeviceThread() : thread_([this] { loop(); }) {}
  ~DeviceThread() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void run(const std::function<void()>& job) {
    std::unique_lock lock(call_mutex_);  // one launch at a time
    {
      std::lock_guard l(mutex_);
      job_ = &job;
    }
    wake_.notify_all();
    std::unique_lock l(mutex_);
    done_.wait(l, [&] { return job_ == nullptr; });
  }

 private:
  void loop() {
    std::unique_lock l(mutex_);
    for (;;) {
      wake_.wait(l, [&] { return stop_ || job_ != nullptr; });
      if (stop_) return;
      l.unlock();
      (*job_)();
      l.lock();
      job_ = nullptr;
      done_.notify_all();
    }
  }

  std::mutex call_mutex_, mutex_;
  std::condition_variable wake_, done_;
  const std::function<void()>* job_ = nullptr;
  bool stop_ = false;
  std::thread thread_;
};

Scheduler& scheduler() {
  static Scheduler s;  // used on the device thread only
  return s;
}

}  // namespace

void sync_threads(std::source_location site) { scheduler().sync_threads(site); }

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, std::source_location site) {
  return scheduler().warp_op(op, mask, value, arg, width, site);
}

namespace {
std::atomic<uint64_t> kernels_run{0};
std::atomic<uint64_t> gemms_run{0};
}  // namespace

void detail::count_gemm_call() { ++gemms_run; }

LaunchCounters launch_counters() { return {kernels_run.load(), gemms_run.load()}; }

void reset_launch_counters() {
  kernels_run = 0;
  gemms_run = 0;
}

cudaError_t launch_kernel(const KernelLaunch& launch) noexcept {
  try {
    const std::string kernel = std::string("kernel ") + launch.name;
    const dim3 g = launch.grid, b = launch.block;
    const uint64_t threads = uint64_t(b.x) * b.y * b.z;
    if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0 || g.x > kMaxGridX || g.y > 65535 ||
        g.z > 65535 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024) {
      return detail::fail(cudaErrorInvalidConfiguration,
                          kernel + ": invalid configuration grid (" + std::to_string(g.x) + "," + std::to_string(g.y) +
                              "," + std::to_string(g.z) + ") block (" + std::to_string(b.x) + "," +
                              std::to_string(b.y) + "," + std::to_string(b.z) + ")");
    }
    static std::atomic<uint64_t> launches{0};
    const uint64_t number = ++launches;
    if (const cudaError_t e = detail::begin_operation(launch.stream, kernel, launch.accesses); e != cudaSuccess) {
      return e;
    }
    static DeviceThread device;
    std::string error;
    device.run([&] { error = scheduler().run(launch, number); });
    if (!error.empty()) return detail::fault(cudaErrorLaunchFailure, kernel + ": " + error);
    if (const cudaError_t e = detail::check_guards(kernel, launch.accesses); e != cudaSuccess) return e;
    ++kernels_run;
    return cudaSuccess;
  } catch (const std::bad_alloc&) {
    return detail::fail(cudaErrorMemoryAllocation, std::string("kernel ") + launch.name + ": host memory exhausted");
  }
}

}  // namespace pagedllm::cuda::emulation
