// The CUDA runtime stand-in: the cuda* calls the project makes, defined
// against the toolkit's own declarations (cuda_runtime_api.h), over host
// memory. Every operation runs when it is enqueued; what a GPU would do
// asynchronously is instead checked:
//
//  - memory: each device or pinned allocation sits between guard zones,
//    checked on free, at every synchronisation and after each kernel that
//    points into it; new memory is filled with 0xff (NaN in f32, f16, bf16);
//    the device has PAGEDLLM_CUDA_EMULATION_MEMORY bytes (default 512M) and
//    an allocation beyond what is free is cudaErrorMemoryAllocation;
//  - copies: the kind must match where the pointers are, and the range must
//    lie inside the allocation (cudaErrorInvalidValue otherwise);
//  - stream ordering, by vector clocks: each stream counts its operations; a
//    stream's clock says how far into every other stream its next operation
//    is ordered (through cudaStreamWaitEvent, the legacy default stream's
//    implicit synchronisation, and whatever the host has synchronised with
//    before enqueuing). An operation that reads a buffer whose last writer
//    it is not ordered after, or writes one whose last writer or readers it
//    is not ordered after, fails with cudaErrorIllegalState naming both.
//    Buffers are whole allocations: a kernel's are those its pointer
//    arguments point into (launch.cuh).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuda_emulation/copy_counters.h"
#include "internal.h"

namespace emu = pagedllm::cuda::emulation;

using Clock = std::vector<uint64_t>;  // [stream id] -> operations of that stream ordered before

struct CUstream_st {
  int id = 0;
  bool blocking = true;  // synchronises with the legacy default stream
  bool destroyed = false;
  uint64_t operations = 0;
  Clock clock;
};

struct CUevent_st {
  bool timing = true;
  bool destroyed = false;
  bool recorded = false;
  Clock clock;
  std::chrono::steady_clock::time_point when;
};

namespace pagedllm::cuda::emulation::detail {
namespace {

constexpr std::size_t kGuard = 256;
constexpr std::size_t kGranule = 256;  // cudaMalloc's alignment
constexpr unsigned char kGuardByte = 0xa5;
constexpr unsigned char kPoisonByte = 0xff;

struct Record {
  int stream = -1;
  uint64_t operation = 0;
  std::string what;
};

struct Allocation {
  uint64_t id = 0;
  bool device = true;  // else pinned host memory
  std::byte* raw = nullptr;
  std::byte* user = nullptr;
  std::size_t bytes = 0;
  std::size_t padded = 0;  // bytes rounded up to kGranule; the rest up to it is guard too
  std::string origin;      // "cudaMalloc", "cudaMallocAsync on stream 2"
  Record last_write;
  std::map<int, Record> reads;  // since the last write, by stream
};

std::size_t parse_bytes(const char* text, std::size_t fallback) {
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  double scale = 1;
  switch (end ? *end : 0) {
    case 'k': case 'K': scale = 1024.0; break;
    case 'm': case 'M': scale = 1024.0 * 1024; break;
    case 'g': case 'G': scale = 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return v > 0 ? std::size_t(v * scale) : fallback;
}

class Device {
 public:
  Device()
      : total_(parse_bytes(std::getenv("PAGEDLLM_CUDA_EMULATION_MEMORY"), std::size_t(512) << 20)),
        count_([] {
          const char* env = std::getenv("PAGEDLLM_CUDA_EMULATION_DEVICES");
          return env ? std::atoi(env) : 1;
        }()) {
    legacy_.id = 0;
    streams_.push_back(&legacy_);
  }

  std::mutex mutex;

  int count() const { return count_; }
  std::size_t total() const { return total_; }
  std::size_t used() const { return used_; }
  std::optional<std::pair<cudaError_t, std::string>> sticky;

  CUstream_st* stream(cudaStream_t s) { return s ? s : &legacy_; }
  CUstream_st* create_stream(bool blocking) {
    auto s = std::make_unique<CUstream_st>();
    s->id = int(owned_streams_.size()) + 1;
    s->blocking = blocking;
    streams_.push_back(s.get());
    owned_streams_.push_back(std::move(s));
    return owned_streams_.back().get();
  }
  CUevent_st* create_event(bool timing) {
    events_.push_back(std::make_unique<CUevent_st>());
    events_.back()->timing = timing;
    return events_.back().get();
  }
  const std::vector<CUstream_st*>& streams() const { return streams_; }

  static void join(Clock& into, const Clock& from) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (std::size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
  }
  Clock& host() { return host_; }

  // The next operation on `s`: ordered after what the host has seen finish
  // and, between the legacy stream and blocking streams, after each other.
  uint64_t advance(CUstream_st* s) {
    join(s->clock, host_);
    if (s == &legacy_) {
      for (CUstream_st* o : streams_) {
        if (o->blocking && o != s && !o->destroyed) join(s->clock, o->clock);
      }
    } else if (s->blocking) {
      join(s->clock, legacy_.clock);
    }
    ++s->operations;
    if (s->clock.size() <= std::size_t(s->id)) s->clock.resize(std::size_t(s->id) + 1, 0);
    s->clock[std::size_t(s->id)] = s->operations;
    return s->operations;
  }
  static bool ordered(const Record& r, const CUstream_st* s) {
    return r.stream < 0 || r.stream == s->id ||
           (std::size_t(r.stream) < s->clock.size() && s->clock[std::size_t(r.stream)] >= r.operation);
  }
  void synchronize_all() {
    for (CUstream_st* s : streams_) join(host_, s->clock);
  }

  // ---- allocations ----

  Allocation* find(const void* p) {
    if (!p || allocations_.empty()) return nullptr;
    auto it = allocations_.upper_bound(reinterpret_cast<uintptr_t>(p));
    if (it == allocations_.begin()) return nullptr;
    --it;
    Allocation& a = it->second;
    const auto* b = static_cast<const std::byte*>(p);
    return b >= a.user && b < a.user + std::max<std::size_t>(a.bytes, 1) ? &a : nullptr;
  }

  Allocation* allocate(std::size_t bytes, bool device, std::string origin) {
    const std::size_t padded = (std::max<std::size_t>(bytes, 1) + kGranule - 1) / kGranule * kGranule;
    auto* raw = static_cast<std::byte*>(std::aligned_alloc(kGranule, padded + 2 * kGuard));
    if (!raw) return nullptr;
    Allocation a;
    a.id = ++next_id_;
    a.device = device;
    a.raw = raw;
    a.user = raw + kGuard;
    a.bytes = bytes;
    a.padded = padded;
    a.origin = std::move(origin);
    std::memset(raw, kGuardByte, kGuard);
    std::memset(a.user, kPoisonByte, bytes);
    std::memset(a.user + bytes, kGuardByte, padded - bytes + kGuard);
#ifdef PAGEDLLM_EMULATION_ASAN
    // Host-compiled kernels that step into a guard zone stop at once under ASan.
    ASAN_POISON_MEMORY_REGION(raw, kGuard);
    ASAN_POISON_MEMORY_REGION(a.user + bytes, padded - bytes + kGuard);
#endif
    if (device) used_ += padded;
    auto [it, inserted] = allocations_.emplace(reinterpret_cast<uintptr_t>(a.user), std::move(a));
    return &it->second;
  }

  void release(Allocation* a) {
#ifdef PAGEDLLM_EMULATION_ASAN
    ASAN_UNPOISON_MEMORY_REGION(a->raw, a->padded + 2 * kGuard);
#endif
    if (a->device) used_ -= a->padded;
    std::free(a->raw);
    allocations_.erase(reinterpret_cast<uintptr_t>(a->user));
  }

  // Empty when intact, else which zone and where.
  __attribute__((no_sanitize_address)) static std::string damaged(const Allocation& a) {
    for (std::size_t i = 0; i < kGuard; ++i) {
      if (static_cast<unsigned char>(a.raw[i]) != kGuardByte) {
        return "the guard zone " + std::to_string(kGuard - i) + " bytes before its start was overwritten";
      }
    }
    const std::size_t tail = a.padded - a.bytes + kGuard;
    for (std::size_t i = 0; i < tail; ++i) {
      if (static_cast<unsigned char>(a.user[a.bytes + i]) != kGuardByte) {
        return "the guard zone " + std::to_string(i) + " bytes past its end was overwritten";
      }
    }
    return {};
  }

  void release_all() {
    while (!allocations_.empty()) release(&allocations_.begin()->second);
  }

  template <class Fn>
  void for_each_allocation(Fn&& fn) {
    for (auto& [key, a] : allocations_) fn(a);
  }

 private:
  std::size_t total_;
  int count_;
  std::size_t used_ = 0;
  uint64_t next_id_ = 0;
  CUstream_st legacy_;
  std::vector<CUstream_st*> streams_;
  std::vector<std::unique_ptr<CUstream_st>> owned_streams_;
  std::vector<std::unique_ptr<CUevent_st>> events_;
  Clock host_;
  std::map<uintptr_t, Allocation> allocations_;
};

Device& device() {
  static Device* d = new Device;  // never destroyed: plugins may free after static destruction
  return *d;
}

thread_local cudaError_t last_error = cudaSuccess;
thread_local cudaError_t detail_code = cudaSuccess;
thread_local std::string detail_message;
thread_local int current_device = 0;

std::string describe(const Allocation& a) {
  return std::string(a.device ? "device" : "pinned host") + " buffer #" + std::to_string(a.id) + " (" +
         std::to_string(a.bytes) + " bytes, " + a.origin + ")";
}

std::string describe_stream(const CUstream_st* s) {
  return s->id == 0 ? std::string("the legacy default stream") : "stream " + std::to_string(s->id);
}

cudaError_t sticky_locked() { return device().sticky ? device().sticky->first : cudaSuccess; }

cudaError_t check_guards_locked(const std::string& after, const Allocation* only) {
  std::string problem;
  auto check = [&](const Allocation& a) {
    if (!problem.empty()) return;
    const std::string d = Device::damaged(a);
    if (!d.empty()) problem = describe(a) + ": " + d;
  };
  if (only) {
    check(*only);
  } else {
    device().for_each_allocation(check);
  }
  if (problem.empty()) return cudaSuccess;
  return fault(cudaErrorIllegalAddress, "memory corruption found after " + after + ": " + problem);
}

// Checks and records the accesses of operation `what` on `s` (already advanced to `op`).
cudaError_t order_locked(CUstream_st* s, uint64_t op, const std::string& what, std::span<const Access> accesses) {
  Device& d = device();
  struct Touch {
    Allocation* a;
    bool write;
  };
  std::vector<Touch> touched;
  for (const Access& x : accesses) {
    Allocation* a = d.find(x.pointer);
    if (!a) continue;
    auto same = std::find_if(touched.begin(), touched.end(), [&](const Touch& t) { return t.a == a; });
    if (same == touched.end()) {
      touched.push_back({a, x.write});
    } else {
      same->write |= x.write;
    }
  }
  const std::string self = what + " on " + describe_stream(s);
  for (const Touch& t : touched) {
    const Record& w = t.a->last_write;
    if (!Device::ordered(w, s)) {
      return fail(cudaErrorIllegalState,
                  "stream ordering: " + self + (t.write ? " writes " : " reads ") + describe(*t.a) +
                      ", last written by " + w.what + " on " +
                      (w.stream == 0 ? std::string("the legacy default stream") : "stream " + std::to_string(w.stream)) +
                      ", with no event wait or synchronisation between them",
                  true);
    }
    if (t.write) {
      for (const auto& [stream, r] : t.a->reads) {
        if (!Device::ordered(r, s)) {
          return fail(cudaErrorIllegalState,
                      "stream ordering: " + self + " writes " + describe(*t.a) + ", which " + r.what + " on " +
                          (stream == 0 ? std::string("the legacy default stream") : "stream " + std::to_string(stream)) +
                          " reads, with no event wait or synchronisation between them",
                      true);
        }
      }
    }
  }
  for (const Touch& t : touched) {
    if (t.write) {
      t.a->last_write = {s->id, op, what};
      t.a->reads.clear();
    } else {
      t.a->reads[s->id] = {s->id, op, what};
    }
  }
  return cudaSuccess;
}

cudaError_t synchronized_locked(const std::string& what) {
  if (const cudaError_t e = sticky_locked()) return e;
  return check_guards_locked(what, nullptr);
}

}  // namespace

cudaError_t fail(cudaError_t code, const std::string& message, bool bug) {
  last_error = code;
  detail_code = code;
  detail_message = message;
  if (bug) {
    std::fprintf(stderr, "pagedllm CUDA emulation: %s\n", message.c_str());
    const char* abort_env = std::getenv("PAGEDLLM_CUDA_EMULATION_ABORT");
    if (abort_env && std::strcmp(abort_env, "1") == 0) std::abort();
  }
  return code;
}

cudaError_t fault(cudaError_t code, const std::string& message) {
  if (!device().sticky) device().sticky.emplace(code, message);
  return fail(code, message, true);
}

cudaError_t begin_operation(cudaStream_t stream, const std::string& what, std::span<const Access> accesses) {
  std::lock_guard lock(device().mutex);
  if (device().sticky) return fail(device().sticky->first, device().sticky->second);
  CUstream_st* s = device().stream(stream);
  if (s->destroyed) return fail(cudaErrorInvalidResourceHandle, what + ": the stream was destroyed");
  const uint64_t op = device().advance(s);
  return order_locked(s, op, what + " (operation " + std::to_string(op) + ")", accesses);
}

cudaError_t check_guards(const std::string& after, std::span<const Access> accesses) {
  std::lock_guard lock(device().mutex);
  if (accesses.empty()) return check_guards_locked(after, nullptr);
  for (const Access& a : accesses) {
    if (const Allocation* found = device().find(a.pointer)) {
      if (const cudaError_t e = check_guards_locked(after, found)) return e;
    }
  }
  return cudaSuccess;
}

cudaError_t check_range(const std::string& what, const void* p, std::size_t bytes) {
  std::lock_guard lock(device().mutex);
  const Allocation* a = device().find(p);
  if (!a || !a->device) return fault(cudaErrorIllegalAddress, what + " is not in device memory");
  if (static_cast<const std::byte*>(p) + bytes > a->user + a->bytes) {
    return fault(cudaErrorIllegalAddress, what + ": " + std::to_string(bytes) + " bytes at offset " +
                                              std::to_string(static_cast<const std::byte*>(p) - a->user) + " of " +
                                              describe(*a) + " run past its end");
  }
  return cudaSuccess;
}

std::string stream_name(cudaStream_t stream) { return describe_stream(device().stream(stream)); }

}  // namespace pagedllm::cuda::emulation::detail

// ---- the runtime API --------------------------------------------------------------------

using namespace pagedllm::cuda::emulation::detail;
namespace detail = pagedllm::cuda::emulation::detail;
using pagedllm::cuda::emulation::Access;

namespace {

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    default: return "cudaErrorUnknown";
  }
}

const char* error_text(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorIllegalState: return "operation not permitted in the current state";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    default: return "unknown error";
  }
}

cudaError_t ok() { return cudaSuccess; }

// Allocation, or an OOM / invalid-value error naming `call`.
cudaError_t allocate(void** p, std::size_t bytes, bool device_memory, const std::string& call) {
  if (!p) return fail(cudaErrorInvalidValue, call + ": null result pointer");
  *p = nullptr;
  auto& d = device();
  std::lock_guard lock(d.mutex);
  if (d.sticky) return fail(d.sticky->first, d.sticky->second);
  if (device_memory && (bytes > d.total() || d.total() - d.used() < bytes)) {
    return fail(cudaErrorMemoryAllocation, call + " of " + std::to_string(bytes) + " bytes: the emulated device has " +
                                               std::to_string(d.total() - d.used()) + " of " +
                                               std::to_string(d.total()) + " bytes free");
  }
  Allocation* a = d.allocate(bytes, device_memory, call);
  if (!a) return fail(cudaErrorMemoryAllocation, call + " of " + std::to_string(bytes) + " bytes: host memory exhausted");
  *p = a->user;
  return ok();
}

cudaError_t release(void* p, bool device_memory, const char* call, CUstream_st* ordered_on) {
  if (!p) return ok();
  auto& d = device();
  std::lock_guard lock(d.mutex);
  Allocation* a = d.find(p);
  if (!a || a->user != p || a->device != device_memory) {
    return fail(cudaErrorInvalidValue, std::string(call) + ": " + std::to_string(reinterpret_cast<uintptr_t>(p)) +
                                           " is not the start of a live " +
                                           (device_memory ? "device allocation" : "pinned host allocation"),
                true);
  }
  std::string what = std::string(call) + " of " + describe(*a);
  if (ordered_on) {
    const uint64_t op = d.advance(ordered_on);
    const Access access{p, true};
    if (const cudaError_t e = order_locked(ordered_on, op, what, std::span(&access, 1))) return e;
  } else {
    d.synchronize_all();  // cudaFree and cudaFreeHost synchronise the device
  }
  const cudaError_t guards = check_guards_locked(what, a);
  d.release(a);
  return guards;
}

bool is_device(const void* p) {
  const Allocation* a = device().find(p);
  return a && a->device;
}

// Validates a copy's direction and ranges; fills the accesses to order.
cudaError_t check_copy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind, const std::string& call,
                       std::vector<Access>& accesses) {
  auto& d = device();
  const bool dst_dev = is_device(dst), src_dev = is_device(src);
  bool want_dst = dst_dev, want_src = src_dev;
  switch (kind) {
    case cudaMemcpyHostToHost: want_dst = want_src = false; break;
    case cudaMemcpyHostToDevice: want_dst = true; want_src = false; break;
    case cudaMemcpyDeviceToHost: want_dst = false; want_src = true; break;
    case cudaMemcpyDeviceToDevice: want_dst = want_src = true; break;
    case cudaMemcpyDefault: break;
    default: return fail(cudaErrorInvalidMemcpyDirection, call + ": copy kind " + std::to_string(int(kind)));
  }
  if (count == 0) return ok();
  if (!dst || !src) return fail(cudaErrorInvalidValue, call + ": null pointer");
  if (dst_dev != want_dst || src_dev != want_src) {
    return fail(cudaErrorInvalidValue,
                call + ": the destination is " + (dst_dev ? "device" : "host") + " memory and the source " +
                    (src_dev ? "device" : "host") + " memory, which the copy kind does not allow",
                true);
  }
  for (auto [p, write] : {std::pair<const void*, bool>{dst, true}, {src, false}}) {
    if (const Allocation* a = d.find(p)) {
      const auto* b = static_cast<const std::byte*>(p);
      if (b + count > a->user + a->bytes) {
        return fail(cudaErrorInvalidValue,
                    call + ": " + std::to_string(count) + " bytes at offset " + std::to_string(b - a->user) + " of " +
                        describe(*a) + " run past its end",
                    true);
      }
      accesses.push_back({p, write});
    } else if (want_dst && p == dst) {
      return fail(cudaErrorInvalidValue, call + ": the destination is not device memory", true);
    }
  }
  return ok();
}

std::string kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    default: return "Default";
  }
}

// Bytes and copies across the host boundary (copy_counters.h), under device().mutex.
emu::CopyCounters copies_across;

cudaError_t copy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind, cudaStream_t stream,
                 const char* call, bool synchronous) {
  std::vector<Access> accesses;
  const std::string what = std::string(call) + "(" + kind_name(kind) + ", " + std::to_string(count) + " bytes)";
  bool to_device = false, to_host = false;
  {
    std::lock_guard lock(device().mutex);
    if (device().sticky) return fail(device().sticky->first, device().sticky->second);
    if (const cudaError_t e = check_copy(dst, src, count, kind, what, accesses)) return e;
    to_device = is_device(dst) && !is_device(src);
    to_host = !is_device(dst) && is_device(src);
  }
  if (const cudaError_t e = begin_operation(stream, what, accesses)) return e;
  if (count) std::memmove(dst, src, count);
  if (count && (to_device || to_host)) {
    std::lock_guard lock(device().mutex);
    (to_device ? copies_across.host_to_device_bytes : copies_across.device_to_host_bytes) += count;
    ++(to_device ? copies_across.host_to_device_copies : copies_across.device_to_host_copies);
  }
  if (synchronous) {
    std::lock_guard lock(device().mutex);
    Device::join(device().host(), device().stream(stream)->clock);
  }
  return ok();
}

cudaError_t set(void* p, int value, std::size_t count, cudaStream_t stream, const char* call, bool synchronous) {
  const std::string what = std::string(call) + "(" + std::to_string(count) + " bytes)";
  {
    std::lock_guard lock(device().mutex);
    if (device().sticky) return fail(device().sticky->first, device().sticky->second);
    const Allocation* a = device().find(p);
    if (count && (!a || !a->device || static_cast<std::byte*>(p) + count > a->user + a->bytes)) {
      return fail(cudaErrorInvalidValue, what + ": the range is not inside one device allocation", true);
    }
  }
  const Access access{p, true};
  if (const cudaError_t e = begin_operation(stream, what, std::span(&access, 1))) return e;
  if (count) std::memset(p, value, count);
  if (synchronous) {
    std::lock_guard lock(device().mutex);
    Device::join(device().host(), device().stream(stream)->clock);
  }
  return ok();
}

}  // namespace

emu::CopyCounters emu::copy_counters() {
  std::lock_guard lock(device().mutex);
  return copies_across;
}

void emu::reset_copy_counters() {
  std::lock_guard lock(device().mutex);
  copies_across = {};
}

extern "C" {

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return last_error; }
const char* cudaGetErrorName(cudaError_t e) { return error_name(e); }
const char* cudaGetErrorString(cudaError_t e) {
  // The emulator's own account of its latest error of this code.
  return e != cudaSuccess && e == detail_code ? detail_message.c_str() : error_text(e);
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue, "cudaDriverGetVersion: null pointer");
  *v = CUDART_VERSION;
  return ok();
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue, "cudaRuntimeGetVersion: null pointer");
  *v = CUDART_VERSION;
  return ok();
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null pointer");
  *count = std::max(device().count(), 0);
  if (*count == 0) return fail(cudaErrorNoDevice, "no CUDA-capable device is detected (PAGEDLLM_CUDA_EMULATION_DEVICES=0)");
  return ok();
}
cudaError_t cudaSetDevice(int d) {
  if (device().count() <= 0) return fail(cudaErrorNoDevice, "cudaSetDevice: no emulated device");
  if (d < 0 || d >= device().count()) {
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(d) + "): the emulation has " +
                                            std::to_string(device().count()) + " device(s)");
  }
  current_device = d;
  return ok();
}
cudaError_t cudaGetDevice(int* d) {
  if (!d) return fail(cudaErrorInvalidValue, "cudaGetDevice: null pointer");
  *d = current_device;
  return ok();
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int d) {
  if (!prop) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null pointer");
  if (d < 0 || d >= device().count()) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: no such device");
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "pagedllm emulated CUDA device");
  prop->totalGlobalMem = device().total();
  prop->sharedMemPerBlock = 48 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->totalConstMem = 64 * 1024;
  prop->l2CacheSize = 0;
  return ok();
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return fail(cudaErrorInvalidValue, "cudaMemGetInfo: null pointer");
  std::lock_guard lock(device().mutex);
  *total_bytes = device().total();
  *free_bytes = device().total() - std::min(device().used(), device().total());
  return ok();
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard lock(device().mutex);
  device().synchronize_all();
  return synchronized_locked("cudaDeviceSynchronize");
}

// Frees every allocation and clears a sticky fault: what a test needs after a
// deliberate one (a GPU process would have to exit). Streams and events stay.
cudaError_t cudaDeviceReset() {
  std::lock_guard lock(device().mutex);
  device().synchronize_all();
  device().release_all();
  device().sticky.reset();
  return ok();
}

// ---- memory ----

cudaError_t cudaMalloc(void** p, size_t bytes) { return allocate(p, bytes, true, "cudaMalloc"); }
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  const std::string call = "cudaMallocAsync on " + stream_name(stream);
  if (const cudaError_t e = allocate(p, bytes, true, call)) return e;
  // Usable in `stream`'s order: another stream must wait for this point first.
  const Access access{*p, true};
  return begin_operation(stream, call, std::span(&access, 1));
}
cudaError_t cudaFree(void* p) { return release(p, true, "cudaFree", nullptr); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  CUstream_st* s = device().stream(stream);
  return release(p, true, "cudaFreeAsync", s);
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int flags) {
  if (flags & ~unsigned(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)) {
    return fail(cudaErrorInvalidValue, "cudaHostAlloc: unknown flags");
  }
  return allocate(p, bytes, false, "cudaHostAlloc");
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return allocate(p, bytes, false, "cudaMallocHost"); }
cudaError_t cudaFreeHost(void* p) { return release(p, false, "cudaFreeHost", nullptr); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return copy(dst, src, count, kind, nullptr, "cudaMemcpy", true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, count, kind, stream, "cudaMemcpyAsync", false);
}
cudaError_t cudaMemset(void* p, int value, size_t count) { return set(p, value, count, nullptr, "cudaMemset", true); }
cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t stream) {
  return set(p, value, count, stream, "cudaMemsetAsync", false);
}

// ---- streams and events ----

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  if (!s) return fail(cudaErrorInvalidValue, "cudaStreamCreate: null pointer");
  std::lock_guard lock(device().mutex);
  *s = device().create_stream(true);
  return ok();
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  if (!s || (flags & ~unsigned(cudaStreamNonBlocking))) return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags");
  std::lock_guard lock(device().mutex);
  *s = device().create_stream((flags & cudaStreamNonBlocking) == 0);
  return ok();
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: the legacy default stream");
  std::lock_guard lock(device().mutex);
  if (s->destroyed) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: destroyed twice", true);
  s->destroyed = true;
  return ok();
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard lock(device().mutex);
  CUstream_st* s = device().stream(stream);
  if (s->destroyed) return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: destroyed stream", true);
  Device::join(device().host(), s->clock);
  return synchronized_locked("cudaStreamSynchronize on " + describe_stream(s));
}
cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }  // always complete
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (!event || flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: null event or flags");
  std::lock_guard lock(device().mutex);
  if (const cudaError_t e = sticky_locked()) return fail(e, device().sticky->second);
  CUstream_st* s = device().stream(stream);
  if (s->destroyed || event->destroyed) {
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: destroyed stream or event", true);
  }
  if (event->recorded) Device::join(s->clock, event->clock);  // an unrecorded event: nothing to wait for
  return ok();
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  if (!e) return fail(cudaErrorInvalidValue, "cudaEventCreate: null pointer");
  std::lock_guard lock(device().mutex);
  *e = device().create_event(true);
  return ok();
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  if (!e || (flags & ~unsigned(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess))) {
    return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags");
  }
  std::lock_guard lock(device().mutex);
  *e = device().create_event((flags & cudaEventDisableTiming) == 0);
  return ok();
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: null event");
  std::lock_guard lock(device().mutex);
  e->destroyed = true;
  return ok();
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: null event");
  std::lock_guard lock(device().mutex);
  if (const cudaError_t err = sticky_locked()) return fail(err, device().sticky->second);
  CUstream_st* s = device().stream(stream);
  if (s->destroyed || e->destroyed) {
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: destroyed stream or event", true);
  }
  Device::join(s->clock, device().host());
  e->clock = s->clock;
  e->recorded = true;
  e->when = std::chrono::steady_clock::now();
  return ok();
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: null event");
  std::lock_guard lock(device().mutex);
  if (e->destroyed) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: destroyed event", true);
  Device::join(device().host(), e->clock);
  return synchronized_locked("cudaEventSynchronize");
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end) return fail(cudaErrorInvalidValue, "cudaEventElapsedTime: null argument");
  if (!start->timing || !end->timing || !start->recorded || !end->recorded) {
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event without timing or not recorded");
  }
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return ok();
}

}  // extern "C"
