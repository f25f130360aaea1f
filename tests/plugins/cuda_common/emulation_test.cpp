// The CUDA emulator itself (plugins/lib/cuda_emulation): what a kernel sees
// (3-D coordinates, shared memory poisoned for every block, shuffles, votes,
// atomics, block order), what it reports instead of hanging (a divergent
// __syncthreads or shuffle, naming the kernel), the runtime's checks (stream
// ordering, guard zones, poisoned new memory, copy ranges, out of memory,
// launch configuration) and the cuBLAS GEMM against a double reference. This
// file is compiled as the emulated build compiles a .cu file (cuda_emulation.h
// first), so its kernels are real CUDA source.

#include <catch2/catch.hpp>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cuda_common/launch.cuh"

// gcc's and clang's spellings of "built with AddressSanitizer".
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ADDRESS_SANITIZER 1
#endif
#endif

using Catch::Matchers::Contains;
namespace cuda = pagedllm::cuda;

namespace {

// Each case starts from a usable device: a deliberate fault is sticky until reset.
struct Reset {
  ~Reset() {
    (void)cudaDeviceReset();
    (void)cudaGetLastError();
  }
};

std::string last_message(cudaError_t e) { return cudaGetErrorString(e); }

template <class T>
cudaError_t device_malloc(T** p, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}

// ---- kernels ------------------------------------------------------------------------

__global__ void coordinates_kernel(int* out) {
  const int block = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  const int thread = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int threads = int(blockDim.x * blockDim.y * blockDim.z);
  atomicAdd(&out[block * threads + thread], 1);
}

// Thread 0 reads the block's shared word before anyone writes it, then writes it.
__global__ void shared_poison_kernel(float* first_read) {
  __shared__ float word;
  if (threadIdx.x == 0) first_read[blockIdx.x] = word;
  __syncthreads();
  if (threadIdx.x == 0) word = 1.0f;
}

// As shared_poison_kernel, on the dynamic shared memory (every float of it).
__global__ void dynamic_shared_poison_kernel(int* nan_count, int floats) {
  float* shared = cuda::dynamic_shared<float>();
  if (threadIdx.x == 0) {
    int count = 0;
    for (int i = 0; i < floats; ++i) count += shared[i] != shared[i];
    nan_count[blockIdx.x] = count;
  }
  __syncthreads();
  for (int i = int(threadIdx.x); i < floats; i += int(blockDim.x)) shared[i] = float(i);
}

// Every thread of 4 blocks x 64 applies each atomic once. cas_wins counts the
// threads whose atomicCAS, and whose atomicExch, saw the slot's initial value.
__global__ void atomics_kernel(int* sums, unsigned* bits, int* cas_wins) {
  const int id = int(blockIdx.x * blockDim.x + threadIdx.x);
  atomicAdd(&sums[0], id);
  atomicSub(&sums[1], 2 * id);
  atomicMax(&sums[2], (id * 37) % 251);
  atomicMin(&sums[3], (id * 37) % 251 - 100);
  atomicOr(&bits[0], 1u << (id % 32));
  atomicAnd(&bits[1], ~(1u << (id % 17)));
  atomicXor(&bits[2], unsigned(id));
  // Exactly one thread finds the slot still 0 and claims it; the others see its id + 1.
  const int old = atomicCAS(&sums[4], 0, id + 1);
  if (old == 0) atomicAdd(&cas_wins[0], 1);
  const int previous = atomicExch(&sums[5], id);
  if (previous == -1) atomicAdd(&cas_wins[1], 1);  // only the first exchange sees the initial -1
}

__global__ void block_order_kernel(int* counter, int* order) {
  if (threadIdx.x == 0) order[atomicAdd(counter, 1)] = int(blockIdx.x);
}

// Block-wide sum through warp shuffles and shared memory (blockDim.x = 128).
__global__ void reduce_kernel(const float* in, float* out) {
  __shared__ float partial[4];
  float v = in[threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) *out = partial[0] + partial[1] + partial[2] + partial[3];
}

// One warp: results of the warp intrinsics per lane.
__global__ void intrinsics_kernel(int* out) {
  const int lane = int(threadIdx.x);
  out[0 * 32 + lane] = __shfl_sync(0xffffffffu, lane * 10, 3);
  out[1 * 32 + lane] = __shfl_xor_sync(0xffffffffu, lane, 1);
  out[2 * 32 + lane] = __shfl_up_sync(0xffffffffu, lane, 2);
  out[3 * 32 + lane] = int(__ballot_sync(0xffffffffu, lane % 3 == 0));
  out[4 * 32 + lane] = __all_sync(0xffffffffu, lane < 32);
  out[5 * 32 + lane] = __any_sync(0xffffffffu, lane == 7);
  out[6 * 32 + lane] = __shfl_xor_sync(0xffffffffu, lane, 4, 8);  // within groups of 8
  if (lane < 16) out[7 * 32 + lane] = __shfl_down_sync(0x0000ffffu, lane, 1, 16);  // half the warp
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) return;  // the others wait at a barrier that half the block never reaches
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void divergent_shuffle_kernel(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x % 2 == 0) v = __shfl_xor_sync(0xffffffffu, v, 1);  // the odd lanes never arrive
  out[threadIdx.x] = v;
}

__global__ void overrun_kernel(float* out, int n) {
  out[n] = 1.0f;  // one past the end
}

__global__ void write_kernel(float* out, float v) { out[threadIdx.x] = v; }
__global__ void read_kernel(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x]; }

template <class T>
std::vector<T> download(const T* device, std::size_t count) {
  std::vector<T> host(count);
  REQUIRE(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

}  // namespace

TEST_CASE("emulation: 3-D grids and blocks run every thread of every block once", "[cuda_emulation]") {
  const dim3 grid(3, 2, 2), block(8, 4, 2);
  const int total = 12 * 64;
  int* out = nullptr;
  REQUIRE(device_malloc(&out, total * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMemset(out, 0, total * sizeof(int)) == cudaSuccess);
  cuda::launch<coordinates_kernel>(grid, block, 0, nullptr, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto counts = download(out, total);
  CHECK(std::all_of(counts.begin(), counts.end(), [](int c) { return c == 1; }));
  REQUIRE(cudaFree(out) == cudaSuccess);
}

TEST_CASE("emulation: shared memory is NaN-poisoned again for every block", "[cuda_emulation]") {
  float* first = nullptr;
  REQUIRE(device_malloc(&first, 6 * sizeof(float)) == cudaSuccess);
  cuda::launch<shared_poison_kernel>(6, 32, 0, nullptr, first);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (const float v : download(first, 6)) CHECK(std::isnan(v));
  REQUIRE(cudaFree(first) == cudaSuccess);
}

TEST_CASE("emulation: dynamic shared memory is NaN-poisoned again for every block", "[cuda_emulation]") {
  const int floats = 300, blocks = 5;
  int* nan_count = nullptr;
  REQUIRE(device_malloc(&nan_count, blocks * sizeof(int)) == cudaSuccess);
  cuda::launch<dynamic_shared_poison_kernel>(blocks, 64, floats * sizeof(float), nullptr, nan_count, floats);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (const int c : download(nan_count, blocks)) CHECK(c == floats);
  REQUIRE(cudaFree(nan_count) == cudaSuccess);
}

TEST_CASE("emulation: atomics give CUDA's results and return the old value", "[cuda_emulation]") {
  const int blocks = 4, threads = 64, n = blocks * threads;
  const std::vector<int> sums_init = {0, 0, -1000, 1000, 0, -1};
  const std::vector<unsigned> bits_init = {0u, 0xffffffffu, 0u};
  int *sums = nullptr, *wins = nullptr;
  unsigned* bits = nullptr;
  REQUIRE(device_malloc(&sums, sums_init.size() * sizeof(int)) == cudaSuccess);
  REQUIRE(device_malloc(&bits, bits_init.size() * sizeof(unsigned)) == cudaSuccess);
  REQUIRE(device_malloc(&wins, 2 * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMemcpy(sums, sums_init.data(), sums_init.size() * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(bits, bits_init.data(), bits_init.size() * sizeof(unsigned), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  REQUIRE(cudaMemset(wins, 0, 2 * sizeof(int)) == cudaSuccess);
  cuda::launch<atomics_kernel>(blocks, threads, 0, nullptr, sums, bits, wins);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  int max = -1000, min = 1000;
  unsigned xor_all = 0;
  for (int id = 0; id < n; ++id) {
    max = std::max(max, (id * 37) % 251);
    min = std::min(min, (id * 37) % 251 - 100);
    xor_all ^= unsigned(id);
  }
  const auto s = download(sums, sums_init.size());
  CHECK(s[0] == n * (n - 1) / 2);
  CHECK(s[1] == -n * (n - 1));
  CHECK(s[2] == max);
  CHECK(s[3] == min);
  CHECK(s[4] >= 1);
  CHECK(s[4] <= n);
  CHECK(s[5] >= 0);
  CHECK(s[5] < n);
  const auto b = download(bits, bits_init.size());
  CHECK(b[0] == 0xffffffffu);
  CHECK(b[1] == (0xffffffffu & ~((1u << 17) - 1)));
  CHECK(b[2] == xor_all);
  const auto w = download(wins, 2);
  CHECK(w[0] == 1);
  CHECK(w[1] == 1);
  for (void* p : {static_cast<void*>(sums), static_cast<void*>(bits), static_cast<void*>(wins)}) {
    REQUIRE(cudaFree(p) == cudaSuccess);
  }
}

TEST_CASE("emulation: blocks run in a shuffled order, a permutation of the grid", "[cuda_emulation]") {
  const int blocks = 64;
  int *counter = nullptr, *order = nullptr;
  REQUIRE(device_malloc(&counter, sizeof(int)) == cudaSuccess);
  REQUIRE(device_malloc(&order, blocks * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMemset(counter, 0, sizeof(int)) == cudaSuccess);
  cuda::launch<block_order_kernel>(blocks, 32, 0, nullptr, counter, order);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  auto seen = download(order, blocks);
  CHECK_FALSE(std::is_sorted(seen.begin(), seen.end()));
  std::sort(seen.begin(), seen.end());
  std::vector<int> all(blocks);
  std::iota(all.begin(), all.end(), 0);
  CHECK(seen == all);
  REQUIRE(cudaFree(counter) == cudaSuccess);
  REQUIRE(cudaFree(order) == cudaSuccess);
}

TEST_CASE("emulation: warp shuffles, votes and masks give CUDA's results", "[cuda_emulation]") {
  int* out = nullptr;
  REQUIRE(device_malloc(&out, 8 * 32 * sizeof(int)) == cudaSuccess);
  cuda::launch<intrinsics_kernel>(1, 32, 0, nullptr, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto r = download(out, 8 * 32);
  unsigned ballot = 0;
  for (int lane = 0; lane < 32; lane += 3) ballot |= 1u << lane;
  for (int lane = 0; lane < 32; ++lane) {
    CAPTURE(lane);
    CHECK(r[0 * 32 + lane] == 30);
    CHECK(r[1 * 32 + lane] == (lane ^ 1));
    CHECK(r[2 * 32 + lane] == (lane >= 2 ? lane - 2 : lane));
    CHECK(unsigned(r[3 * 32 + lane]) == ballot);
    CHECK(r[4 * 32 + lane] == 1);
    CHECK(r[5 * 32 + lane] == 1);
    CHECK(r[6 * 32 + lane] == (lane ^ 4));
    if (lane < 16) CHECK(r[7 * 32 + lane] == (lane < 15 ? lane + 1 : lane));
  }
  REQUIRE(cudaFree(out) == cudaSuccess);
}

TEST_CASE("emulation: a block reduction through shuffles and __syncthreads", "[cuda_emulation]") {
  std::vector<float> host(128);
  std::iota(host.begin(), host.end(), 1.0f);
  float *in = nullptr, *out = nullptr;
  REQUIRE(device_malloc(&in, 128 * sizeof(float)) == cudaSuccess);
  REQUIRE(device_malloc(&out, sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(in, host.data(), 128 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  cuda::launch<reduce_kernel>(1, 128, 0, nullptr, in, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(download(out, 1)[0] == 128.0f * 129.0f / 2.0f);
  REQUIRE(cudaFree(in) == cudaSuccess);
  REQUIRE(cudaFree(out) == cudaSuccess);
}

TEST_CASE("emulation: a divergent __syncthreads is an error naming the kernel, not a hang", "[cuda_emulation]") {
  Reset reset;
  int* out = nullptr;
  REQUIRE(device_malloc(&out, 64 * sizeof(int)) == cudaSuccess);
  cuda::launch<divergent_barrier_kernel>(1, 64, 0, nullptr, out);
  const cudaError_t e = cudaGetLastError();
  REQUIRE(e == cudaErrorLaunchFailure);
  CHECK_THAT(last_message(e), Contains("divergent_barrier_kernel") && Contains("divergent __syncthreads") &&
                                  Contains("has returned") && Contains("emulation_test.cpp"));
  // Sticky, as on a GPU: the context is unusable afterwards.
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
}

TEST_CASE("emulation: a divergent shuffle is an error naming the kernel and the lanes", "[cuda_emulation]") {
  Reset reset;
  float* out = nullptr;
  REQUIRE(device_malloc(&out, 32 * sizeof(float)) == cudaSuccess);
  cuda::launch<divergent_shuffle_kernel>(1, 32, 0, nullptr, out);
  const cudaError_t e = cudaGetLastError();
  REQUIRE(e == cudaErrorLaunchFailure);
  CHECK_THAT(last_message(e), Contains("divergent_shuffle_kernel") && Contains("__shfl_xor_sync") &&
                                  Contains("has returned"));
}

TEST_CASE("emulation: a write past an allocation is caught at its guard zone, naming the kernel", "[cuda_emulation]") {
#ifdef UNDER_ADDRESS_SANITIZER
  // The emulator poisons its guard zones for ASan, which then stops the write itself
  // (use-after-poison in overrun_kernel) before the emulator's check could see it.
  WARN("SKIPPED under AddressSanitizer: it stops the write into the poisoned guard zone itself");
  return;
#endif
  Reset reset;
  float* out = nullptr;
  REQUIRE(device_malloc(&out, 100 * sizeof(float)) == cudaSuccess);
  cuda::launch<overrun_kernel>(1, 1, 0, nullptr, out, 100);
  const cudaError_t e = cudaGetLastError();
  REQUIRE(e == cudaErrorIllegalAddress);
  CHECK_THAT(last_message(e), Contains("overrun_kernel") && Contains("past its end"));
}

TEST_CASE("emulation: a launch beyond the limits is cudaErrorInvalidConfiguration", "[cuda_emulation]") {
  float* out = nullptr;
  REQUIRE(device_malloc(&out, 32 * sizeof(float)) == cudaSuccess);
  cuda::launch<write_kernel>(1, 2048, 0, nullptr, out, 1.0f);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  cuda::launch<write_kernel>(dim3(1, 70000), 32, 0, nullptr, out, 1.0f);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  cuda::launch<write_kernel>(0, 32, 0, nullptr, out, 1.0f);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  REQUIRE(cudaFree(out) == cudaSuccess);
}

TEST_CASE("emulation: new device memory is poisoned, copies are range- and kind-checked", "[cuda_emulation]") {
  float* p = nullptr;
  REQUIRE(device_malloc(&p, 16 * sizeof(float)) == cudaSuccess);
  for (const float v : download(p, 16)) CHECK(std::isnan(v));
  std::vector<float> host(32, 1.0f);
  cudaError_t e = cudaMemcpy(p, host.data(), 32 * sizeof(float), cudaMemcpyHostToDevice);
  CHECK(e == cudaErrorInvalidValue);
  CHECK_THAT(last_message(e), Contains("run past its end"));
  e = cudaMemcpy(host.data(), p, 16 * sizeof(float), cudaMemcpyHostToDevice);
  CHECK(e == cudaErrorInvalidValue);
  CHECK(cudaFree(host.data()) == cudaErrorInvalidValue);
  REQUIRE(cudaFree(p) == cudaSuccess);
  (void)cudaGetLastError();
}

TEST_CASE("emulation: device memory is the configured size, and beyond it is cudaErrorMemoryAllocation",
          "[cuda_emulation]") {
  size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  CHECK(free_bytes <= total_bytes);
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 1 << 20) == cudaSuccess);
  size_t free_after = 0;
  REQUIRE(cudaMemGetInfo(&free_after, &total_bytes) == cudaSuccess);
  CHECK(free_bytes - free_after == (1 << 20));
  void* q = nullptr;
  const cudaError_t e = cudaMalloc(&q, free_after + 1);
  CHECK(e == cudaErrorMemoryAllocation);
  CHECK_THAT(last_message(e), Contains("bytes free"));
  CHECK(q == nullptr);
  REQUIRE(cudaFree(p) == cudaSuccess);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK(prop.totalGlobalMem == total_bytes);
  CHECK(prop.warpSize == 32);
  (void)cudaGetLastError();
}

TEST_CASE("emulation: a missing event wait between streams is reported naming both operations", "[cuda_emulation]") {
  cudaStream_t producer = nullptr, consumer = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t written = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&written, cudaEventDisableTiming) == cudaSuccess);
  float *a = nullptr, *b = nullptr;
  REQUIRE(device_malloc(&a, 32 * sizeof(float)) == cudaSuccess);
  REQUIRE(device_malloc(&b, 32 * sizeof(float)) == cudaSuccess);
  std::vector<float> host(32);

  SECTION("read after write, no wait: an error") {
    cuda::launch<write_kernel>(1, 32, 0, producer, a, 2.0f);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const cudaError_t e = cudaMemcpyAsync(host.data(), a, 32 * sizeof(float), cudaMemcpyDeviceToHost, consumer);
    REQUIRE(e == cudaErrorIllegalState);
    CHECK_THAT(last_message(e), Contains("stream ordering") && Contains("cudaMemcpyAsync(DeviceToHost") &&
                                    Contains("kernel write_kernel") && Contains("no event wait"));
  }
  SECTION("read after write with the event wait: fine") {
    cuda::launch<write_kernel>(1, 32, 0, producer, a, 2.0f);
    REQUIRE(cudaEventRecord(written, producer) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(consumer, written, 0) == cudaSuccess);
    cuda::launch<read_kernel>(1, 32, 0, consumer, a, b);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(host.data(), b, 32 * sizeof(float), cudaMemcpyDeviceToHost, consumer) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(consumer) == cudaSuccess);
    CHECK(host[31] == 2.0f);
  }
  SECTION("an event recorded before the write does not order it") {
    REQUIRE(cudaEventRecord(written, producer) == cudaSuccess);
    cuda::launch<write_kernel>(1, 32, 0, producer, a, 2.0f);
    REQUIRE(cudaStreamWaitEvent(consumer, written, 0) == cudaSuccess);
    cuda::launch<read_kernel>(1, 32, 0, consumer, a, b);
    const cudaError_t e = cudaGetLastError();
    REQUIRE(e == cudaErrorIllegalState);
    CHECK_THAT(last_message(e), Contains("kernel read_kernel") && Contains("kernel write_kernel"));
  }
  SECTION("write after read, no wait: an error") {
    REQUIRE(cudaMemset(a, 0, 32 * sizeof(float)) == cudaSuccess);
    cuda::launch<read_kernel>(1, 32, 0, consumer, a, b);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const cudaError_t e = cudaMemcpyAsync(a, host.data(), 32 * sizeof(float), cudaMemcpyHostToDevice, producer);
    REQUIRE(e == cudaErrorIllegalState);
    CHECK_THAT(last_message(e), Contains("kernel read_kernel") && Contains("reads"));
  }
  SECTION("the host synchronising with the writer orders later work on any stream") {
    cuda::launch<write_kernel>(1, 32, 0, producer, a, 3.0f);
    REQUIRE(cudaStreamSynchronize(producer) == cudaSuccess);
    cuda::launch<read_kernel>(1, 32, 0, consumer, a, b);
    CHECK(cudaGetLastError() == cudaSuccess);
  }
  SECTION("blocking streams and the legacy default stream order each other") {
    cudaStream_t blocking = nullptr;
    REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
    cuda::launch<write_kernel>(1, 32, 0, blocking, a, 4.0f);
    cuda::launch<read_kernel>(1, 32, 0, nullptr, a, b);
    CHECK(cudaGetLastError() == cudaSuccess);
    // A non-blocking stream is not ordered after the legacy stream.
    const cudaError_t e = cudaMemcpyAsync(host.data(), b, 32 * sizeof(float), cudaMemcpyDeviceToHost, consumer);
    CHECK(e == cudaErrorIllegalState);
    REQUIRE(cudaStreamDestroy(blocking) == cudaSuccess);
  }
  (void)cudaDeviceSynchronize();
  (void)cudaGetLastError();
  REQUIRE(cudaFree(a) == cudaSuccess);
  REQUIRE(cudaFree(b) == cudaSuccess);
  REQUIRE(cudaEventDestroy(written) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(producer) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(consumer) == cudaSuccess);
}

TEST_CASE("emulation: cublasGemmEx against a double reference, with cuBLAS's argument checks", "[cuda_emulation]") {
  cublasHandle_t handle = nullptr;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  // C[m, n] = op(A) op(B), column-major, A stored k x m (transposed), lda > k.
  const int m = 5, n = 3, k = 7, lda = 9, ldb = 8, ldc = 6;
  std::vector<float> a(std::size_t(lda * m)), b(std::size_t(ldb * n)), c(std::size_t(ldc * n), NAN);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(std::sin(double(i)));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(std::cos(double(i) * 0.7));
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  REQUIRE(device_malloc(&da, a.size() * 4) == cudaSuccess);
  REQUIRE(device_malloc(&db, b.size() * 4) == cudaSuccess);
  REQUIRE(device_malloc(&dc, c.size() * 4) == cudaSuccess);
  REQUIRE(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);  // NaN: beta = 0 ignores it
  const float alpha = 1.5f, beta = 0.0f;
  REQUIRE(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_32F, lda, db, CUDA_R_32F, ldb,
                       &beta, dc, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  const auto got = download(dc, c.size());
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double ref = 0;
      for (int l = 0; l < k; ++l) ref += double(a[std::size_t(i * lda + l)]) * double(b[std::size_t(j * ldb + l)]);
      CHECK(got[std::size_t(j * ldc + i)] == float(1.5 * ref));
    }
  }
  // Leading dimensions below their minimum, negative sizes: INVALID_VALUE.
  CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_32F, k - 1, db, CUDA_R_32F, ldb,
                     &beta, dc, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_32F, lda, db, CUDA_R_32F, ldb,
                     &beta, dc, CUDA_R_32F, m - 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, -1, n, k, &alpha, da, CUDA_R_32F, lda, db, CUDA_R_32F, ldb,
                     &beta, dc, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  // f16 inputs into a bf16 output is no combination cublasGemmEx lists.
  CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_16F, lda, db, CUDA_R_16F, ldb,
                     &beta, dc, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  // Strided batched: two batches of the same product, the second into the second half of C.
  float* dc2 = nullptr;
  REQUIRE(device_malloc(&dc2, 2 * c.size() * 4) == cudaSuccess);
  REQUIRE(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_32F, lda, 0, db,
                                     CUDA_R_32F, ldb, 0, &beta, dc2, CUDA_R_32F, ldc, (long long)c.size(), 2,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  const auto batched = download(dc2, 2 * c.size());
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      CHECK(batched[std::size_t(j * ldc + i)] == got[std::size_t(j * ldc + i)]);
      CHECK(batched[c.size() + std::size_t(j * ldc + i)] == got[std::size_t(j * ldc + i)]);
    }
  }
  REQUIRE(cublasDestroy(handle) == CUBLAS_STATUS_SUCCESS);
  for (float* p : {da, db, dc, dc2}) REQUIRE(cudaFree(p) == cudaSuccess);
}

namespace {

// `v` rounded to nearest-even with `bits` significand bits (bf16: 8, f16: 11);
// normal range only, which the values below stay in.
double round_to_bits(double v, int bits) {
  if (v == 0) return v;
  int e = 0;
  (void)std::frexp(v, &e);
  const double scale = std::ldexp(1.0, e - bits);
  return std::nearbyint(v / scale) * scale;  // the default rounding mode: to nearest, ties to even
}

}  // namespace

// The project's GEMMs in 16-bit (llama_cuda: CUBLAS_OP_T x CUBLAS_OP_N, f16/bf16 in,
// the same type or f32 out) and the other operand layouts: the product of the
// stored values in double, plus beta C, rounded once to C's type.
TEST_CASE("emulation: cublasGemmEx in bf16 and f16, every operand layout, rounded once to C's type",
          "[cuda_emulation]") {
  cublasHandle_t handle = nullptr;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  const int m = 4, n = 3, k = 37, ld = 40;  // every leading dimension 40: any layout fits
  // Multiples of 1/8 up to 2: exact in bf16 and f16, so only the output rounds.
  std::vector<double> a(std::size_t(ld * ld)), b(std::size_t(ld * ld)), c(std::size_t(ld * n));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = double(int(i * 7 % 33) - 16) / 8;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = double(int(i * 5 % 29) - 14) / 8;
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = double(int(i % 9) - 4) / 8;
  struct Types {
    cudaDataType_t in, out;
    int in_bits, out_bits;  // significand bits; 24 = f32
  };
  const Types types[] = {{CUDA_R_16BF, CUDA_R_16BF, 8, 8},
                         {CUDA_R_16BF, CUDA_R_32F, 8, 24},
                         {CUDA_R_16F, CUDA_R_16F, 11, 11},
                         {CUDA_R_16F, CUDA_R_32F, 11, 24}};
  const auto to_bytes = [](const std::vector<double>& v, cudaDataType_t t) {
    std::vector<unsigned char> out(v.size() * (t == CUDA_R_32F ? 4 : 2));
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (t == CUDA_R_16BF) {
        const __nv_bfloat16 x = __float2bfloat16(float(v[i]));
        std::memcpy(&out[2 * i], &x, 2);
      } else if (t == CUDA_R_16F) {
        const __half x = __float2half(float(v[i]));
        std::memcpy(&out[2 * i], &x, 2);
      } else {
        const float x = float(v[i]);
        std::memcpy(&out[4 * i], &x, 4);
      }
    }
    return out;
  };
  const auto from_bytes = [](const std::vector<unsigned char>& bytes, std::size_t i, cudaDataType_t t) {
    if (t == CUDA_R_16BF) {
      __nv_bfloat16 x;
      std::memcpy(&x, &bytes[2 * i], 2);
      return double(__bfloat162float(x));
    }
    if (t == CUDA_R_16F) {
      __half x;
      std::memcpy(&x, &bytes[2 * i], 2);
      return double(__half2float(x));
    }
    float x;
    std::memcpy(&x, &bytes[4 * i], 4);
    return double(x);
  };
  for (const Types& t : types) {
    for (const cublasOperation_t op_a : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      for (const cublasOperation_t op_b : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        CAPTURE(int(t.in), int(t.out), int(op_a), int(op_b));
        const auto ha = to_bytes(a, t.in), hb = to_bytes(b, t.in), hc = to_bytes(c, t.out);
        void *da = nullptr, *db = nullptr, *dc = nullptr;
        REQUIRE(device_malloc(&da, ha.size()) == cudaSuccess);
        REQUIRE(device_malloc(&db, hb.size()) == cudaSuccess);
        REQUIRE(device_malloc(&dc, hc.size()) == cudaSuccess);
        REQUIRE(cudaMemcpy(da, ha.data(), ha.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(cudaMemcpy(db, hb.data(), hb.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(cudaMemcpy(dc, hc.data(), hc.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        const float alpha = 0.75f, beta = 0.5f;
        REQUIRE(cublasGemmEx(handle, op_a, op_b, m, n, k, &alpha, da, t.in, ld, db, t.in, ld, &beta, dc, t.out, ld,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
        std::vector<unsigned char> got(hc.size());
        REQUIRE(cudaMemcpy(got.data(), dc, got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
        int wrong = 0;
        for (int j = 0; j < n; ++j) {
          for (int i = 0; i < m; ++i) {
            double sum = 0;
            for (int l = 0; l < k; ++l) {
              const double x = a[std::size_t(op_a == CUBLAS_OP_N ? l * ld + i : i * ld + l)];
              const double y = b[std::size_t(op_b == CUBLAS_OP_N ? j * ld + l : l * ld + j)];
              sum += x * y;
            }
            const std::size_t at = std::size_t(j * ld + i);
            const double want = round_to_bits(0.75 * sum + 0.5 * c[at], t.out_bits);
            if (from_bytes(got, at, t.out) != want) ++wrong;
          }
        }
        CHECK(wrong == 0);
        for (void* p : {da, db, dc}) REQUIRE(cudaFree(p) == cudaSuccess);
      }
    }
  }
  REQUIRE(cublasDestroy(handle) == CUBLAS_STATUS_SUCCESS);
}
