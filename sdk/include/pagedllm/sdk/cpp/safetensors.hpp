#pragma once
// Reading HF checkpoints: safetensors files, memory-mapped (POSIX), and model
// directories holding model.safetensors or shards listed in
// model.safetensors.index.json. Not part of pagedllm/sdk.hpp (it needs POSIX
// file mapping); include it explicitly:
//
//   #include <pagedllm/sdk/cpp/safetensors.hpp>
//
//   pllm::safetensors::Checkpoint ckpt("models/tiny");   // opens and validates every file
//   const auto& w = ckpt.require("model.norm.weight", {hidden});
//   std::vector<float> values(w.numel());
//   w.to_f32(0, w.numel(), values.data());
//
// A file is validated completely when it is opened, so a view never points
// outside its mapping: the 8-byte little-endian header length (at most
// kMaxHeaderBytes and within the file), the JSON header (an object; no
// duplicate names; `__metadata__` a string-to-string map), every tensor's
// dtype (F32, F16, BF16, and the integer I8, I32, I64 that quantized checkpoints
// store their values, packs and shapes in; others are PLLM_ERROR_UNSUPPORTED), shape (non-negative,
// no overflow), data_offsets (inside the data area, and numel x dtype size
// bytes long), and the layout of the data area (tensors back to back: no
// overlap, no hole, no trailing bytes; what the safetensors reference
// implementation requires). Every error is a pllm::Error whose message starts
// with the file's path and names the tensor or key concerned.
//
// Views stay valid as long as the File (or Checkpoint) they came from.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedllm/sdk/cpp/error.hpp"
#include "pagedllm/sdk/cpp/float_convert.hpp"
#include "pagedllm/sdk/cpp/mapped_file.hpp"
#include "pagedllm/sdk/tensor.h"

namespace pllm::safetensors {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// The largest header accepted, as in the reference implementation (100 MB).
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

inline constexpr const char* kSingleFileName = "model.safetensors";
inline constexpr const char* kIndexFileName = "model.safetensors.index.json";

inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The safetensors name of a dtype ("BF16").
inline const char* dtype_name(pllm_dtype dtype) {
  switch (dtype) {
    case PLLM_DTYPE_F32: return "F32";
    case PLLM_DTYPE_F16: return "F16";
    case PLLM_DTYPE_BF16: return "BF16";
    case PLLM_DTYPE_I32: return "I32";
    case PLLM_DTYPE_I64: return "I64";
    case PLLM_DTYPE_U8: return "U8";
    case PLLM_DTYPE_I8: return "I8";
    case PLLM_DTYPE_FORCE_32BIT:
    case PLLM_DTYPE_INVALID: return "invalid";
  }
  return "unknown";
}

class File;

// One tensor of a mapped file.
struct TensorView {
  std::string name;
  pllm_dtype dtype = PLLM_DTYPE_INVALID;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;  // little-endian, not necessarily aligned
  std::uint64_t nbytes = 0;
  const File* file = nullptr;       // the file it lives in

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  // "<file>: tensor '<name>'", the start of any message about this tensor.
  std::string where() const;
  // Converts elements [first, first + count) to f32 (exactly; see float_convert.hpp).
  // An integer tensor is PLLM_ERROR_UNSUPPORTED: its values mean what the
  // checkpoint's quantization config says, so its reader interprets `data`.
  void to_f32(std::int64_t first, std::int64_t count, float* dst) const {
    if (!is_float_dtype(dtype)) {
      throw Error(PLLM_ERROR_UNSUPPORTED, where() + ": is " + dtype_name(dtype) +
                                              ", not a float tensor (its quantization config says what it holds)");
    }
    if (first < 0 || count < 0 || first + count > numel()) {
      throw Error(PLLM_ERROR_INVALID_ARGUMENT, where() + ": elements [" + std::to_string(first) + ", " +
                                                   std::to_string(first + count) + ") are out of range for " +
                                                   std::to_string(numel()));
    }
    pllm::to_f32(data + first * pllm_dtype_size(dtype), dtype, dst, count);
  }
};

// One safetensors file, mapped read-only and validated on construction.
class File {
 public:
  // The mapping is a member: a file refused by parse_header() is unmapped as
  // the constructor throws.
  explicit File(std::filesystem::path path)
      : path_(std::move(path)),
        mapping_(path_,
                 [this](std::uint64_t size) {
                   if (size < 8) {
                     fail(PLLM_ERROR_INVALID_CONFIG,
                          "truncated: " + std::to_string(size) +
                              " bytes, but a safetensors file starts with an 8-byte header length");
                   }
                 }),
        size_(mapping_.size()) {
    parse_header();
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::uint64_t size_bytes() const { return size_; }
  // The header's "__metadata__" (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Every tensor, in the order of their data.
  const std::vector<TensorView>& tensors() const { return tensors_; }

  const TensorView* find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
  }

  [[noreturn]] void fail(pllm_status status, const std::string& message) const {
    throw Error(status, path_.string() + ": " + message);
  }

 private:
  const std::byte* bytes() const { return mapping_.data(); }

  void parse_header() {
    std::uint64_t header_len = 0;
    std::memcpy(&header_len, bytes(), 8);
    if (header_len > kMaxHeaderBytes) {
      fail(PLLM_ERROR_INVALID_CONFIG, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                                          std::to_string(kMaxHeaderBytes) + " bytes: not a safetensors file?");
    }
    if (header_len > size_ - 8) {
      fail(PLLM_ERROR_INVALID_CONFIG, "header length " + std::to_string(header_len) + " exceeds the file's " +
                                          std::to_string(size_ - 8) + " bytes after the length: truncated file?");
    }
    const char* text = reinterpret_cast<const char*>(bytes() + 8);
    // nlohmann keeps the last of duplicate keys; the callback sees them all.
    std::set<std::string, std::less<>> seen;
    std::string duplicate;
    auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string()) {
        if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty()) duplicate = parsed.get<std::string>();
      }
      return true;
    };
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(text, text + header_len, on_event);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number JSON cannot hold
      fail(PLLM_ERROR_INVALID_CONFIG, std::string("header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) fail(PLLM_ERROR_INVALID_CONFIG, "header is not a JSON object");
    if (!duplicate.empty()) fail(PLLM_ERROR_INVALID_CONFIG, "tensor '" + duplicate + "' appears twice in the header");

    const std::uint64_t data_start = 8 + header_len;
    const std::uint64_t data_size = size_ - data_start;
    struct Span {
      std::uint64_t begin, end;
      std::size_t index;
    };
    std::vector<Span> spans;
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        parse_metadata(entry);
        continue;
      }
      TensorView view = parse_entry(name, entry);
      const auto& offsets = entry.at("data_offsets");
      const std::uint64_t begin = offsets[0].get<std::uint64_t>();
      const std::uint64_t end = offsets[1].get<std::uint64_t>();
      const std::string what = "tensor '" + name + "': ";
      if (end > data_size) {
        fail(PLLM_ERROR_INVALID_CONFIG, what + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                            ") run past the " + std::to_string(data_size) +
                                            " bytes of data in the file: truncated file?");
      }
      if (view.nbytes != end - begin) {
        fail(PLLM_ERROR_INVALID_CONFIG, what + "shape " + shape_string(view.shape) + " of " + dtype_name(view.dtype) +
                                            " needs " + std::to_string(view.nbytes) + " bytes, but data_offsets [" +
                                            std::to_string(begin) + ", " + std::to_string(end) + ") hold " +
                                            std::to_string(end - begin));
      }
      view.data = bytes() + data_start + begin;
      spans.push_back({begin, end, tensors_.size()});
      tensors_.push_back(std::move(view));
    }
    // The data area must be exactly the tensors, back to back.
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    std::uint64_t covered = 0;
    const Span* previous = nullptr;
    for (const Span& s : spans) {
      const std::string& name = tensors_[s.index].name;
      if (s.begin < covered) {
        fail(PLLM_ERROR_INVALID_CONFIG, "tensor '" + name + "' (bytes [" + std::to_string(s.begin) + ", " +
                                            std::to_string(s.end) + ")) overlaps tensor '" +
                                            tensors_[previous->index].name + "' (bytes [" +
                                            std::to_string(previous->begin) + ", " + std::to_string(previous->end) + "))");
      }
      if (s.begin > covered) {
        fail(PLLM_ERROR_INVALID_CONFIG, "bytes [" + std::to_string(covered) + ", " + std::to_string(s.begin) +
                                            ") of the data area before tensor '" + name + "' belong to no tensor");
      }
      covered = s.end;
      previous = &s;
    }
    if (covered != data_size) {
      fail(PLLM_ERROR_INVALID_CONFIG, std::to_string(data_size - covered) + " bytes after the last tensor" +
                                          (previous ? " ('" + tensors_[previous->index].name + "')" : std::string()) +
                                          " belong to no tensor");
    }
    // Views in data order; the name index points into the final vector.
    std::vector<TensorView> ordered;
    ordered.reserve(spans.size());
    for (const Span& s : spans) ordered.push_back(std::move(tensors_[s.index]));
    tensors_ = std::move(ordered);
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      tensors_[i].file = this;
      by_name_.emplace(tensors_[i].name, i);
    }
  }

  void parse_metadata(const nlohmann::json& entry) {
    if (!entry.is_object()) fail(PLLM_ERROR_INVALID_CONFIG, "__metadata__ is not a JSON object");
    for (const auto& [key, value] : entry.items()) {
      if (!value.is_string()) fail(PLLM_ERROR_INVALID_CONFIG, "__metadata__ key '" + key + "' is not a string");
      metadata_.emplace(key, value.get<std::string>());
    }
  }

  TensorView parse_entry(const std::string& name, const nlohmann::json& entry) const {
    const std::string what = "tensor '" + name + "': ";
    if (!entry.is_object()) fail(PLLM_ERROR_INVALID_CONFIG, what + "entry is not a JSON object");
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) fail(PLLM_ERROR_INVALID_CONFIG, what + "missing '" + key + "'");
    }
    TensorView view;
    view.name = name;
    const auto& dtype = entry.at("dtype");
    if (!dtype.is_string()) fail(PLLM_ERROR_INVALID_CONFIG, what + "dtype is not a string");
    view.dtype = parse_dtype(what, dtype.get<std::string>());
    const auto& shape = entry.at("shape");
    if (!shape.is_array()) fail(PLLM_ERROR_INVALID_CONFIG, what + "shape is not an array");
    std::uint64_t numel = 1;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > std::uint64_t(INT64_MAX)) {
        fail(PLLM_ERROR_INVALID_CONFIG, what + "shape " + shape.dump() + " is not a list of non-negative integers");
      }
      const std::uint64_t extent = d.get<std::uint64_t>();
      if (__builtin_mul_overflow(numel, extent, &numel)) {
        fail(PLLM_ERROR_INVALID_CONFIG, what + "shape " + shape.dump() + " overflows");
      }
      view.shape.push_back(static_cast<std::int64_t>(extent));
    }
    const auto& offsets = entry.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned() || offsets[0].get<std::uint64_t>() > offsets[1].get<std::uint64_t>()) {
      fail(PLLM_ERROR_INVALID_CONFIG, what + "data_offsets " + offsets.dump() + " are not [begin, end] with begin <= end");
    }
    if (__builtin_mul_overflow(numel, std::uint64_t(pllm_dtype_size(view.dtype)), &view.nbytes) ||
        view.nbytes > std::uint64_t(INT64_MAX)) {
      fail(PLLM_ERROR_INVALID_CONFIG, what + "shape " + shape.dump() + " overflows");
    }
    return view;
  }

  pllm_dtype parse_dtype(const std::string& what, const std::string& name) const {
    if (name == "F32") return PLLM_DTYPE_F32;
    if (name == "F16") return PLLM_DTYPE_F16;
    if (name == "BF16") return PLLM_DTYPE_BF16;
    if (name == "I8") return PLLM_DTYPE_I8;
    if (name == "I32") return PLLM_DTYPE_I32;
    if (name == "I64") return PLLM_DTYPE_I64;
    static const char* const kKnown[] = {"F64", "U64", "U32", "I16", "U16", "U8", "BOOL",
                                         "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};
    for (const char* known : kKnown) {
      if (name == known) fail(PLLM_ERROR_UNSUPPORTED, what + "dtype " + name + " is not supported (F32, F16, BF16, I8, I32, I64)");
    }
    fail(PLLM_ERROR_INVALID_CONFIG, what + "unknown dtype '" + name + "'");
  }

  std::filesystem::path path_;
  MappedFile mapping_;
  std::uint64_t size_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::size_t, std::less<>> by_name_;
};

inline std::string TensorView::where() const {
  return (file ? file->path().string() : std::string("(no file)")) + ": tensor '" + name + "'";
}

// An HF model directory's weights: model.safetensors, or the shards that
// model.safetensors.index.json's weight_map names (every shard must exist,
// every tensor must be in the shard the map says, no tensor in two shards).
class Checkpoint {
 public:
  explicit Checkpoint(std::filesystem::path directory) : directory_(std::move(directory)) {
    std::error_code ec;
    if (!std::filesystem::is_directory(directory_, ec)) {
      throw Error(PLLM_ERROR_NOT_FOUND, directory_.string() + ": model directory does not exist");
    }
    if (std::filesystem::exists(directory_ / kIndexFileName, ec)) {
      open_sharded();
    } else if (std::filesystem::exists(directory_ / kSingleFileName, ec)) {
      add_file(directory_ / kSingleFileName);
    } else {
      throw Error(PLLM_ERROR_NOT_FOUND, directory_.string() + ": neither " + kSingleFileName + " nor " +
                                            kIndexFileName + " exists");
    }
  }

  const std::filesystem::path& directory() const { return directory_; }
  bool sharded() const { return sharded_; }
  const std::vector<std::unique_ptr<File>>& files() const { return files_; }
  std::uint64_t total_bytes() const {
    std::uint64_t total = 0;
    for (const auto& [name, view] : tensors_) total += view->nbytes;
    return total;
  }

  // Every tensor name, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, view] : tensors_) out.push_back(name);
    return out;
  }

  const TensorView* find(std::string_view name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : it->second;
  }

  // The tensor `name`; PLLM_ERROR_NOT_FOUND naming the files searched.
  const TensorView& require(std::string_view name) const {
    if (const TensorView* view = find(name)) return *view;
    throw Error(PLLM_ERROR_NOT_FOUND, source() + ": tensor '" + std::string(name) + "' is missing");
  }

  // The tensor `name` of exactly `shape`; a mismatch names file, tensor and both shapes.
  const TensorView& require(std::string_view name, const std::vector<std::int64_t>& shape) const {
    const TensorView& view = require(name);
    if (view.shape != shape) {
      throw Error(PLLM_ERROR_INVALID_CONFIG,
                  view.where() + " has shape " + shape_string(view.shape) + ", expected " + shape_string(shape));
    }
    return view;
  }

 private:
  // What error messages name for the checkpoint as a whole.
  std::string source() const {
    return (directory_ / (sharded_ ? kIndexFileName : kSingleFileName)).string();
  }

  const File& add_file(const std::filesystem::path& path) {
    files_.push_back(std::make_unique<File>(path));
    const File& file = *files_.back();
    for (const TensorView& view : file.tensors()) {
      auto [it, inserted] = tensors_.emplace(view.name, &view);
      if (!inserted) {
        throw Error(PLLM_ERROR_INVALID_CONFIG, path.string() + ": tensor '" + view.name + "' is also in " +
                                                   it->second->file->path().string());
      }
    }
    return file;
  }

  void open_sharded() {
    sharded_ = true;
    const std::filesystem::path index_path = directory_ / kIndexFileName;
    auto fail = [&](pllm_status status, const std::string& message) {
      throw Error(status, index_path.string() + ": " + message);
    };
    std::ifstream in(index_path, std::ios::binary);
    if (!in) fail(PLLM_ERROR_IO, "cannot open");
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number JSON cannot hold
      fail(PLLM_ERROR_INVALID_CONFIG, std::string("not valid JSON: ") + e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      fail(PLLM_ERROR_INVALID_CONFIG, "has no 'weight_map' object");
    }
    // Shards in order of first appearance, each with the tensors it should hold.
    std::vector<std::pair<std::string, std::vector<std::string>>> shards;
    for (const auto& [tensor, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) fail(PLLM_ERROR_INVALID_CONFIG, "weight_map['" + tensor + "'] is not a file name");
      const std::string file = shard.get<std::string>();
      const std::filesystem::path relative(file);
      const bool escapes = std::any_of(relative.begin(), relative.end(), [](const auto& part) { return part == ".."; });
      if (file.empty() || relative.is_absolute() || escapes) {
        fail(PLLM_ERROR_INVALID_CONFIG, "weight_map['" + tensor + "'] = '" + file +
                                            "' is not a file name inside the model directory");
      }
      auto it = std::find_if(shards.begin(), shards.end(), [&](const auto& s) { return s.first == file; });
      if (it == shards.end()) it = shards.insert(shards.end(), {file, {}});
      it->second.push_back(tensor);
    }
    if (shards.empty()) fail(PLLM_ERROR_INVALID_CONFIG, "weight_map is empty");
    for (const auto& [shard, tensors] : shards) {
      const std::filesystem::path path = directory_ / shard;
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) {
        fail(PLLM_ERROR_NOT_FOUND, "shard '" + shard + "' (holding tensor '" + tensors.front() + "'" +
                                       (tensors.size() > 1 ? " and " + std::to_string(tensors.size() - 1) + " more" : "") +
                                       ") does not exist");
      }
      const File& file = add_file(path);
      for (const std::string& tensor : tensors) {
        if (!file.find(tensor)) {
          fail(PLLM_ERROR_INVALID_CONFIG, "weight_map puts tensor '" + tensor + "' in '" + shard + "', which has no such tensor");
        }
      }
    }
  }

  std::filesystem::path directory_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<File>> files_;
  std::map<std::string, const TensorView*, std::less<>> tensors_;
};

}  // namespace pllm::safetensors
