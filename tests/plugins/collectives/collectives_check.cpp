// collectives_check: one rank of a collectives plugin test, run under mpirun
// (tests/plugins/collectives/CMakeLists.txt). Each rank builds every rank's
// input from (rank, index) alone, so it computes the expected result of every
// collective itself — a plain loop over the ranks' inputs — and compares.
//
//   collectives_check <plugin> correctness <world size>   results equal the references; bad calls refused
//   collectives_check_cuda <plugin> correctness-cuda <world size>  the same with every buffer on cuda:0 (all
//                                                          ranks share it: one GPU; emulated, each its own) and a
//                                                          stream (collectives_check_cuda: this file linked with
//                                                          the CUDA runtime)
//   collectives_check <plugin> stuck-peer                  rank 1 never joins: rank 0's all_reduce times out
//   collectives_check <plugin> dead-peer                   rank 1 exits: the job must end, never hang
//   collectives_check <plugin> cuda-alone                  alone on cuda:0: works, or fails as a device error
//
// Exit 0 when every check passed; a failed check prints "FAILED: ..." and exits 1.

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifdef PAGEDLLM_CHECK_LINKS_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/float16_rounding.h"
#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "pagedllm/sdk.h"

namespace {

using pagedllm::plugins::f32_to_bf16;
using pagedllm::plugins::f32_to_f16;

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

float bf16_value(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t(bits) << 16); }

float f16_value(std::uint16_t bits) {
  const std::uint32_t sign = std::uint32_t(bits & 0x8000u) << 16;
  const int exponent = (bits >> 10) & 0x1f;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) return (sign ? -1.0f : 1.0f) * std::ldexp(float(mantissa), -24);
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | (std::uint32_t(exponent + 112) << 23) | (mantissa << 13));
}

// Rank r's value at index i: a fixed hash mapped into [-4, 4).
float input_value(int rank, std::int64_t i) {
  std::uint64_t x = std::uint64_t(rank) * 0x9e3779b97f4a7c15ull + std::uint64_t(i) * 0xbf58476d1ce4e5b9ull + 1;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return float(x >> 40) / float(1 << 24) * 8.0f - 4.0f;
}

#ifdef PAGEDLLM_CHECK_LINKS_CUDA
void require_cuda(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("CUDA: ") + what);
}
#endif

class Communicator {
 public:
  Communicator(std::shared_ptr<const pagedllm::PluginLibrary> library, const std::string& options,
               pllm_device device = {PLLM_DEVICE_CPU, 0}) {
    pllm_collectives_create_args args{};
    args.struct_size = sizeof args;
    args.options_json = options.c_str();
    args.device = device;
    instance_ = pagedllm::create_plugin_instance<pllm_collectives_api, pllm_communicator>(std::move(library), args);
    pllm_communicator_info info{};
    info.struct_size = sizeof info;
    pllm_error error{};
    pagedllm::check_plugin_call(api().get_info(get(), &info, &error), error, instance_.library(), "get_info");
    rank = info.rank;
    world_size = info.world_size;
#ifdef PAGEDLLM_CHECK_LINKS_CUDA
    on_cuda = device.type == PLLM_DEVICE_CUDA;
    if (on_cuda) {
      cudaStream_t created = nullptr;
      require_cuda(cudaSetDevice(device.index) == cudaSuccess && cudaStreamCreate(&created) == cudaSuccess,
                   "a stream");
      stream = created;
    }
#endif
  }
  ~Communicator() {
#ifdef PAGEDLLM_CHECK_LINKS_CUDA
    if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
#endif
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  const pllm_collectives_api& api() const { return instance_.api(); }
  pllm_communicator* get() const { return instance_.get(); }

  int rank = -1;
  int world_size = 0;
  bool on_cuda = false;
  void* stream = nullptr;  // on CUDA: a stream of the test's own, not the default one

 private:
  pagedllm::CollectivesInstance instance_;
};

// The buffer a call is given: on a CUDA communicator, a device copy of a host array (uploaded at
// construction, downloaded by download()); on the CPU, the host array itself.
class CallBuffer {
 public:
  CallBuffer(const Communicator& c, void* host, std::size_t bytes) : host_(host), bytes_(bytes), data_(host) {
#ifdef PAGEDLLM_CHECK_LINKS_CUDA
    if (!c.on_cuda) return;
    require_cuda(cudaMalloc(&data_, std::max<std::size_t>(bytes, 1)) == cudaSuccess, "cudaMalloc");
    on_device_ = true;
    if (bytes > 0) require_cuda(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
#else
    (void)c;
#endif
  }
  ~CallBuffer() {
#ifdef PAGEDLLM_CHECK_LINKS_CUDA
    if (on_device_) cudaFree(data_);
#endif
  }
  CallBuffer(const CallBuffer&) = delete;
  CallBuffer& operator=(const CallBuffer&) = delete;
  template <class T = void>
  T* get() const { return static_cast<T*>(data_); }
  void download() {
#ifdef PAGEDLLM_CHECK_LINKS_CUDA
    if (on_device_ && bytes_ > 0) {
      require_cuda(cudaMemcpy(host_, data_, bytes_, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    }
#endif
  }

 private:
  void* host_;
  std::size_t bytes_;
  void* data_;
  bool on_device_ = false;
};

// Runs one call; returns its status and leaves its message in `message`.
template <class Call>
pllm_status attempt(Call&& call, std::string* message = nullptr) {
  pllm_error error{};
  const pllm_status status = call(&error);
  if (message) *message = error.message;
  return status;
}

void check_all_reduce_f32(Communicator& c, std::int64_t count) {
  std::vector<float> buffer(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) buffer[i] = input_value(c.rank, i);
  CallBuffer call(c, buffer.data(), buffer.size() * sizeof(float));
  std::string message;
  const pllm_status status = attempt([&](pllm_error* e) {
    return c.api().all_reduce(c.get(), call.get(), count, PLLM_DTYPE_F32, PLLM_REDUCE_SUM, c.stream, e);
  }, &message);
  call.download();
  expect(status == PLLM_OK, "all_reduce f32 count " + std::to_string(count) + ": " + message);
  // With two ranks a + b is one correctly rounded f32 addition: exact. More
  // ranks may add in another order than this loop: within a few ulps.
  std::int64_t mismatches = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    float expected = 0.0f;
    for (int r = 0; r < c.world_size; ++r) expected += input_value(r, i);
    const float tolerance = c.world_size <= 2 ? 0.0f : 1e-6f * 4.0f * float(c.world_size);
    if (!(std::fabs(buffer[i] - expected) <= tolerance)) ++mismatches;
  }
  expect(mismatches == 0, "all_reduce f32 count " + std::to_string(count) + ": " + std::to_string(mismatches) +
                              " elements differ from the reference sum");
}

void check_all_reduce_16(Communicator& c, pllm_dtype dtype, std::int64_t count) {
  const bool bf16 = dtype == PLLM_DTYPE_BF16;
  auto round = [&](float v) { return bf16 ? f32_to_bf16(v) : f32_to_f16(v); };
  auto value = [&](std::uint16_t b) { return bf16 ? bf16_value(b) : f16_value(b); };
  std::vector<std::uint16_t> buffer(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) buffer[i] = round(input_value(c.rank, i));
  CallBuffer call(c, buffer.data(), buffer.size() * sizeof(std::uint16_t));
  std::string message;
  const pllm_status status = attempt([&](pllm_error* e) {
    return c.api().all_reduce(c.get(), call.get(), count, dtype, PLLM_REDUCE_SUM, c.stream, e);
  }, &message);
  call.download();
  const std::string name = bf16 ? "bf16" : "f16";
  expect(status == PLLM_OK, "all_reduce " + name + ": " + message);
  // The documented accumulation: the 16-bit inputs summed in f32, rounded once.
  std::int64_t mismatches = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (int r = 0; r < c.world_size; ++r) sum += value(round(input_value(r, i)));
    if (c.world_size <= 2 ? buffer[i] != round(sum) : std::fabs(value(buffer[i]) - sum) > 0.02f * std::fabs(sum)) {
      ++mismatches;
    }
  }
  expect(mismatches == 0, "all_reduce " + name + ": " + std::to_string(mismatches) + " elements differ");
}

void check_all_gather(Communicator& c, std::int64_t count, bool in_place) {
  std::vector<std::int32_t> recv(static_cast<std::size_t>(count * c.world_size), -1);
  std::vector<std::int32_t> send(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) send[i] = c.rank * 1000003 + std::int32_t(i);
  if (in_place) std::copy(send.begin(), send.end(), recv.begin() + c.rank * count);
  CallBuffer send_call(c, send.data(), send.size() * sizeof(std::int32_t));
  CallBuffer recv_call(c, recv.data(), recv.size() * sizeof(std::int32_t));
  const std::int32_t* source =
      in_place ? recv_call.get<std::int32_t>() + c.rank * count : send_call.get<std::int32_t>();
  std::string message;
  const pllm_status status = attempt([&](pllm_error* e) {
    return c.api().all_gather(c.get(), source, recv_call.get(), count, PLLM_DTYPE_I32, c.stream, e);
  }, &message);
  recv_call.download();
  const std::string what = "all_gather count " + std::to_string(count) + (in_place ? " in place" : "");
  expect(status == PLLM_OK, what + ": " + message);
  std::int64_t mismatches = 0;
  for (int r = 0; r < c.world_size; ++r) {
    for (std::int64_t i = 0; i < count; ++i) mismatches += recv[r * count + i] != r * 1000003 + std::int32_t(i);
  }
  expect(mismatches == 0, what + ": " + std::to_string(mismatches) + " elements differ");
}

void check_broadcast(Communicator& c, std::int64_t bytes, int root) {
  std::vector<unsigned char> buffer(static_cast<std::size_t>(bytes));
  for (std::int64_t i = 0; i < bytes; ++i) buffer[i] = static_cast<unsigned char>((c.rank * 31 + i * 7) & 0xff);
  CallBuffer call(c, buffer.data(), buffer.size());
  std::string message;
  const pllm_status status = attempt([&](pllm_error* e) {
    return c.api().broadcast(c.get(), call.get(), bytes, root, c.stream, e);
  }, &message);
  call.download();
  const std::string what = "broadcast " + std::to_string(bytes) + " bytes from rank " + std::to_string(root);
  expect(status == PLLM_OK, what + ": " + message);
  std::int64_t mismatches = 0;
  for (std::int64_t i = 0; i < bytes; ++i) mismatches += buffer[i] != ((root * 31 + i * 7) & 0xff);
  expect(mismatches == 0, what + ": " + std::to_string(mismatches) + " bytes differ");
}

void correctness(const std::shared_ptr<const pagedllm::PluginLibrary>& library, int expected_world_size,
                 pllm_device device) {
  Communicator c(library, "{\"timeout_seconds\": 120}", device);
  expect(c.world_size == expected_world_size,
         "world size " + std::to_string(c.world_size) + ", launched with " + std::to_string(expected_world_size));
  // Every rank distinct and in range: gather the ranks.
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(c.world_size), -1);
  std::int32_t mine = c.rank;
  {
    CallBuffer send(c, &mine, sizeof mine), recv(c, ranks.data(), ranks.size() * sizeof(std::int32_t));
    expect(attempt([&](pllm_error* e) {
             return c.api().all_gather(c.get(), send.get(), recv.get(), 1, PLLM_DTYPE_I32, c.stream, e);
           }) == PLLM_OK, "all_gather of ranks");
    recv.download();
  }
  for (int r = 0; r < c.world_size; ++r) expect(ranks[r] == r, "rank " + std::to_string(r) + " reported " +
                                                               std::to_string(ranks[r]));

  for (std::int64_t count : {0, 1, 7, 4096, (1 << 20) + 3}) check_all_reduce_f32(c, count);
  for (pllm_dtype dtype : {PLLM_DTYPE_BF16, PLLM_DTYPE_F16}) check_all_reduce_16(c, dtype, 100003);
  for (std::int64_t count : {0, 1, 4097}) {
    check_all_gather(c, count, false);
    check_all_gather(c, count, true);
  }
  for (int root = 0; root < c.world_size; ++root) {
    for (std::int64_t bytes : {0, 13, (1 << 20) + 1}) check_broadcast(c, bytes, root);
  }
  expect(attempt([&](pllm_error* e) { return c.api().barrier(c.get(), e); }) == PLLM_OK, "barrier");

  // Bad calls are refused on every rank alike, before any communication.
  std::string message;
  float value = 1.0f;
  std::int32_t integer = 1;
  CallBuffer value_call(c, &value, sizeof value), integer_call(c, &integer, sizeof integer);
  expect(attempt([&](pllm_error* e) {
           return c.api().broadcast(c.get(), value_call.get(), 4, c.world_size, c.stream, e);
         }, &message) == PLLM_ERROR_INVALID_ARGUMENT && message.find("root") != std::string::npos,
         "broadcast from a root outside the group is refused, naming the root: " + message);
  expect(attempt([&](pllm_error* e) {
           return c.api().all_reduce(c.get(), integer_call.get(), 1, PLLM_DTYPE_I32, PLLM_REDUCE_SUM, c.stream, e);
         }, &message) == PLLM_ERROR_UNSUPPORTED, "all_reduce of i32 is refused as unsupported: " + message);
  expect(attempt([&](pllm_error* e) {
           return c.api().all_reduce(c.get(), nullptr, 4, PLLM_DTYPE_F32, PLLM_REDUCE_SUM, c.stream, e);
         }, &message) == PLLM_ERROR_INVALID_ARGUMENT, "all_reduce of a null buffer is refused: " + message);
  // The communicator still works after refused calls.
  check_all_reduce_f32(c, 5);

  if (device.type == PLLM_DEVICE_CUDA) return;
  // A device the plugin cannot serve is refused by name at create: built with CUDA, one that does not exist.
#ifdef PAGEDLLM_PLUGINS_HAVE_CUDA
  const pllm_device refused = {PLLM_DEVICE_CUDA, 64};
  const std::string named = "cuda:64";
#else
  const pllm_device refused = {PLLM_DEVICE_CUDA, 0};
  const std::string named = "cpu";
#endif
  try {
    Communicator cuda(library, "{}", refused);
    expect(false, "a communicator on a device this build cannot serve was created");
  } catch (const std::exception& e) {
    expect(std::string(e.what()).find(named) != std::string::npos, std::string("device refusal: ") + e.what());
  }
}

// Rank 1 never joins; rank 0's all_reduce must fail with a timeout, and
// destroying its broken communicator ends the job (MPI_Abort), so this scenario
// exits non-zero by design: the ctest wrapper checks the output and the time.
void stuck_peer(const std::shared_ptr<const pagedllm::PluginLibrary>& library) {
  auto c = std::make_unique<Communicator>(library, "{\"timeout_seconds\": 1}");
  if (c->rank != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return;
  }
  float value = 1.0f;
  std::string message;
  const pllm_status status = attempt([&](pllm_error* e) {
    return c->api().all_reduce(c->get(), &value, 1, PLLM_DTYPE_F32, PLLM_REDUCE_SUM, nullptr, e);
  }, &message);
  std::printf("rank 0 all_reduce: status %s: %s\n", pllm_status_name(status), message.c_str());
  const pllm_status again = attempt([&](pllm_error* e) { return c->api().barrier(c->get(), e); }, &message);
  std::printf("rank 0 barrier after the failure: status %s: %s\n", pllm_status_name(again), message.c_str());
  std::fflush(stdout);
  c.reset();
  std::printf("rank 0 destroyed its broken communicator and is still running\n");
}

// Rank 1 exits without a word; rank 0 waits in an all_reduce (timeout 60 s).
void dead_peer(const std::shared_ptr<const pagedllm::PluginLibrary>& library) {
  Communicator c(library, "{\"timeout_seconds\": 60}");
  if (c.rank == 1) _exit(3);
  float value = 1.0f;
  std::string message;
  const pllm_status status = attempt([&](pllm_error* e) {
    return c.api().all_reduce(c.get(), &value, 1, PLLM_DTYPE_F32, PLLM_REDUCE_SUM, nullptr, e);
  }, &message);
  std::printf("rank 0 all_reduce: status %s: %s\n", pllm_status_name(status), message.c_str());
}

// A CUDA plugin on cuda:0, run alone (world size 1): on a machine without a
// GPU, create must fail cleanly with a device error naming cuda:0; with one,
// every collective of a group of one must leave its data as it was.
void cuda_alone(const std::shared_ptr<const pagedllm::PluginLibrary>& library) {
  pllm_collectives_create_args args{};
  args.struct_size = sizeof args;
  args.options_json = "{\"timeout_seconds\": 30}";
  args.device = {PLLM_DEVICE_CUDA, 0};
  pllm_error error{};
  pllm_communicator* comm = nullptr;
  const pllm_status status = library->api<pllm_collectives_api>().create(&args, &comm, &error);
  if (status != PLLM_OK) {
    std::printf("create on cuda:0: %s: %s\n", pllm_status_name(status), error.message);
    expect(status == PLLM_ERROR_DEVICE && std::string(error.message).find("cuda:0") != std::string::npos,
           std::string("create on cuda:0 failed, but not as a device error naming cuda:0: ") + error.message);
    return;
  }
  const auto& api = library->api<pllm_collectives_api>();
  pllm_communicator_info info{};
  info.struct_size = sizeof info;
  expect(api.get_info(comm, &info, &error) == PLLM_OK && info.world_size == 1 && info.rank == 0,
         "cuda:0 alone: rank 0 of 1");
  expect(api.barrier(comm, &error) == PLLM_OK, std::string("cuda:0 barrier: ") + error.message);
  api.destroy(comm);
  std::printf("create on cuda:0: a group of one works (the device checks are docs/gpu-validation.md's)\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <plugin> correctness[-cuda] <world size> | stuck-peer | dead-peer | cuda-alone\n",
                 argv[0]);
    return 2;
  }
  const std::string plugin = argv[1];
  const std::string scenario = argv[2];
  try {
    pagedllm::PluginRegistry registry({PAGEDLLM_BINARY_DIR "/plugins"});
    const std::shared_ptr<const pagedllm::PluginLibrary> library =
        registry.load(plugin, PLLM_PLUGIN_KIND_COLLECTIVES, "collectives.plugin");
    if (scenario == "correctness" && argc == 4) {
      correctness(library, std::atoi(argv[3]), {PLLM_DEVICE_CPU, 0});
#ifdef PAGEDLLM_CHECK_LINKS_CUDA
    } else if (scenario == "correctness-cuda" && argc == 4) {
      correctness(library, std::atoi(argv[3]), {PLLM_DEVICE_CUDA, 0});
#endif
    } else if (scenario == "stuck-peer") {
      stuck_peer(library);
    } else if (scenario == "cuda-alone") {
      cuda_alone(library);
    } else if (scenario == "dead-peer") {
      dead_peer(library);
    } else {
      std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    return 1;
  }
  if (failures) return 1;
  std::printf("collectives_check %s %s: every check passed\n", plugin.c_str(), scenario.c_str());
  return 0;
}
