#pragma once
// Reading GGUF files (llama.cpp's model format), memory-mapped (POSIX). Not part
// of pagedllm/sdk.hpp; include it explicitly:
//
//   #include <pagedllm/sdk/cpp/gguf.hpp>
//
//   pllm::gguf::File file("model.gguf");                  // parses and validates everything
//   const pllm::gguf::Value* arch = file.find_metadata("general.architecture");
//   const pllm::gguf::TensorInfo& t = file.require("token_embd.weight");
//   std::vector<float> row(t.dims[0]);
//   t.to_f32(0, t.dims[0], row.data());                  // dequantized (gguf_quants.hpp)
//
// The file is treated as hostile: it is parsed completely when opened, and a view
// never points outside the mapping. Checked (each failure is a pllm::Error,
// PLLM_ERROR_INVALID_CONFIG unless said otherwise, whose message starts with the
// path and names the field and its byte offset):
//   - magic "GGUF"; version 2 or 3 (1 and big-endian files: PLLM_ERROR_UNSUPPORTED);
//   - n_tensors <= kMaxTensors and n_kv <= kMaxMetadata, and each no larger than the
//     bytes left could hold (so no count makes us allocate more than the file's size);
//   - every read inside the file; string lengths <= kMaxStringBytes and inside the file;
//     keys and tensor names non-empty, unique, <= kMaxNameBytes; array lengths bounded
//     by the bytes left at the smallest element size, and <= kMaxMetadataValues array
//     elements in all; arrays nested <= kMaxArrayDepth;
//     value types and tensor types known (the value's offset in the message);
//   - general.alignment, when present, a UINT32 power of two;
//   - n_dims <= 4 (GGML_MAX_DIMS); every dimension <= INT64_MAX; their product, the
//     byte size and offset + size without overflow; dims[0] a multiple of the type's
//     block size;
//   - every tensor's offset a multiple of the alignment, its bytes inside the data
//     section, and no two tensors overlapping.
// Tensor types the reader does not dequantize (Q5_0, IQ*, ...) are parsed and sized;
// to_f32 refuses them with PLLM_ERROR_UNSUPPORTED.
//
// Views stay valid as long as the File they came from.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pagedllm/sdk/cpp/error.hpp"
#include "pagedllm/sdk/cpp/gguf_types.hpp"
#include "pagedllm/sdk/cpp/mapped_file.hpp"

namespace pllm::gguf {

static_assert(std::endian::native == std::endian::little, "the reader reads little-endian GGUF on little-endian hosts");

inline constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr std::uint32_t kDefaultAlignment = 32;
inline constexpr std::uint32_t kMaxDims = 4;          // GGML_MAX_DIMS
// Sane caps far above any real model (a 405B model has ~1,100 tensors and ~40 keys).
inline constexpr std::uint64_t kMaxTensors = 1u << 20;
inline constexpr std::uint64_t kMaxMetadata = 1u << 16;
inline constexpr std::uint64_t kMaxNameBytes = 65535;          // the spec's limit on keys
inline constexpr std::uint64_t kMaxStringBytes = 1ull << 30;   // one string value
inline constexpr std::uint32_t kMaxArrayDepth = 8;             // arrays of arrays of ...
// Array elements in all the metadata: a parsed value takes ~90 bytes, so this bounds
// the memory a file of one-byte elements can make us allocate (a 256k-token vocabulary
// with scores, types and merges holds ~1.3M).
inline constexpr std::uint64_t kMaxMetadataValues = 1u << 22;

// The metadata value types of the GGUF spec.
enum class ValueType : std::uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

inline const char* value_type_name(ValueType type) {
  switch (type) {
    case ValueType::UINT8: return "UINT8";
    case ValueType::INT8: return "INT8";
    case ValueType::UINT16: return "UINT16";
    case ValueType::INT16: return "INT16";
    case ValueType::UINT32: return "UINT32";
    case ValueType::INT32: return "INT32";
    case ValueType::FLOAT32: return "FLOAT32";
    case ValueType::BOOL: return "BOOL";
    case ValueType::STRING: return "STRING";
    case ValueType::ARRAY: return "ARRAY";
    case ValueType::UINT64: return "UINT64";
    case ValueType::INT64: return "INT64";
    case ValueType::FLOAT64: return "FLOAT64";
  }
  return "unknown";
}

// One metadata value. Scalars keep their exact type; integers are held widened in
// `u` (unsigned types) or `i` (signed types and BOOL), floats in `f`.
struct Value {
  ValueType type = ValueType::UINT8;
  std::uint64_t u = 0;
  std::int64_t i = 0;
  double f = 0;
  std::string s;                // STRING
  ValueType element_type = ValueType::UINT8;  // ARRAY
  std::vector<Value> array;     // ARRAY

  bool is_integer() const {
    switch (type) {
      case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: case ValueType::UINT64:
      case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
        return true;
      case ValueType::FLOAT32: case ValueType::FLOAT64: case ValueType::BOOL: case ValueType::STRING:
      case ValueType::ARRAY:
        return false;
    }
    return false;
  }
  bool is_signed() const {
    return type == ValueType::INT8 || type == ValueType::INT16 || type == ValueType::INT32 || type == ValueType::INT64;
  }
};

class File;

// One tensor: its ggml dimensions (dims[0] the innermost, contiguous one; the
// reverse of the numpy/HF shape), type, and bytes inside the mapping.
struct TensorInfo {
  std::string name;
  std::vector<std::int64_t> dims;
  GgmlType type = GgmlType::F32;
  std::uint64_t offset = 0;       // from the start of the data section, as stored
  const std::byte* data = nullptr;
  std::uint64_t nbytes = 0;
  const File* file = nullptr;

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
  }
  // "<file>: tensor '<name>'".
  std::string where() const;
  // Dequantizes elements [first, first + count) to f32; both must be multiples of the
  // type's block size. PLLM_ERROR_UNSUPPORTED for types dequantize() does not know.
  void to_f32(std::int64_t first, std::int64_t count, float* dst) const;
};

class File {
 public:
  // The mapping is a member: a file refused by parse() is unmapped as the
  // constructor throws (gguf_fuzz found the leak when it was not).
  explicit File(std::filesystem::path path)
      : path_(std::move(path)),
        mapping_(path_,
                 [this](std::uint64_t size) {
                   if (size == 0) fail(PLLM_ERROR_INVALID_CONFIG, "empty file: not a GGUF file");
                 }),
        size_(mapping_.size()) {
    parse();
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::uint64_t size_bytes() const { return size_; }
  std::uint32_t version() const { return version_; }
  std::uint32_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }
  // Metadata in file order, and by key.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find_metadata(std::string_view key) const {
    auto it = metadata_index_.find(key);
    return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
  }
  // Tensors in file (tensor info) order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
  }
  const TensorInfo& require(std::string_view name) const {
    if (const TensorInfo* t = find(name)) return *t;
    fail(PLLM_ERROR_NOT_FOUND, "tensor '" + std::string(name) + "' is missing");
  }

  [[noreturn]] void fail(pllm_status status, const std::string& message) const {
    throw Error(status, path_.string() + ": " + message);
  }

 private:
  const std::byte* bytes() const { return mapping_.data(); }

  // ---- reading with bounds ----------------------------------------------------------
  [[noreturn]] void fail_at(std::uint64_t offset, const std::string& field, const std::string& message) const {
    fail(PLLM_ERROR_INVALID_CONFIG, "offset " + std::to_string(offset) + ": " + field + ": " + message);
  }
  void need(std::uint64_t n, const std::string& field) const {
    if (n > size_ - pos_) {
      fail_at(pos_, field, "needs " + std::to_string(n) + " bytes, but the file ends at byte " +
                               std::to_string(size_) + " (truncated?)");
    }
  }
  template <class T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T value;
    std::memcpy(&value, bytes() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::string read_string(const std::string& field, std::uint64_t max_bytes) {
    const std::uint64_t at = pos_;
    const auto length = read<std::uint64_t>(field + " (length)");
    if (length > max_bytes) {
      fail_at(at, field, "string length " + std::to_string(length) + " exceeds the limit of " +
                             std::to_string(max_bytes) + " bytes");
    }
    need(length, field + " (" + std::to_string(length) + " bytes of text)");
    std::string s(reinterpret_cast<const char*>(bytes() + pos_), static_cast<std::size_t>(length));
    pos_ += length;
    return s;
  }
  // A count that `min_bytes_each` bytes per item must fit in what is left of the file.
  void check_count(std::uint64_t at, std::uint64_t count, std::uint64_t min_bytes_each, std::uint64_t cap,
                   const std::string& field) const {
    if (count > cap) {
      fail_at(at, field, std::to_string(count) + " exceeds the limit of " + std::to_string(cap));
    }
    if (count > (size_ - pos_) / min_bytes_each) {
      fail_at(at, field, std::to_string(count) + " items of at least " + std::to_string(min_bytes_each) +
                             " bytes each do not fit in the " + std::to_string(size_ - pos_) +
                             " bytes left (truncated or corrupt?)");
    }
  }

  static std::uint64_t min_value_bytes(ValueType type) {
    switch (type) {
      case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
      case ValueType::UINT16: case ValueType::INT16: return 2;
      case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
      case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
      case ValueType::STRING: return 8;   // the length
      case ValueType::ARRAY: return 12;   // element type + length
    }
    return 1;
  }

  ValueType read_value_type(const std::string& field) {
    const std::uint64_t at = pos_;
    const auto raw = read<std::uint32_t>(field);
    if (raw > static_cast<std::uint32_t>(ValueType::FLOAT64)) {
      fail_at(at, field, "unknown value type " + std::to_string(raw));
    }
    return static_cast<ValueType>(raw);
  }

  Value read_value(ValueType type, const std::string& field, std::uint32_t depth) {
    Value v;
    v.type = type;
    switch (type) {
      case ValueType::UINT8: v.u = read<std::uint8_t>(field); break;
      case ValueType::INT8: v.i = read<std::int8_t>(field); break;
      case ValueType::UINT16: v.u = read<std::uint16_t>(field); break;
      case ValueType::INT16: v.i = read<std::int16_t>(field); break;
      case ValueType::UINT32: v.u = read<std::uint32_t>(field); break;
      case ValueType::INT32: v.i = read<std::int32_t>(field); break;
      case ValueType::UINT64: v.u = read<std::uint64_t>(field); break;
      case ValueType::INT64: v.i = read<std::int64_t>(field); break;
      case ValueType::FLOAT32: v.f = read<float>(field); break;
      case ValueType::FLOAT64: v.f = read<double>(field); break;
      case ValueType::BOOL: {
        const std::uint64_t at = pos_;
        const auto b = read<std::uint8_t>(field);
        if (b > 1) fail_at(at, field, "BOOL value " + std::to_string(b) + " is neither 0 nor 1");
        v.i = b;
        break;
      }
      case ValueType::STRING: v.s = read_string(field, kMaxStringBytes); break;
      case ValueType::ARRAY: {
        if (depth >= kMaxArrayDepth) {
          fail_at(pos_, field, "arrays nested deeper than " + std::to_string(kMaxArrayDepth));
        }
        v.element_type = read_value_type(field + " (array element type)");
        const std::uint64_t at = pos_;
        const auto n = read<std::uint64_t>(field + " (array length)");
        check_count(at, n, min_value_bytes(v.element_type), kMaxMetadataValues - array_values_,
                    field + " (array length)");
        array_values_ += n;
        v.array.reserve(static_cast<std::size_t>(n));
        for (std::uint64_t k = 0; k < n; ++k) {
          v.array.push_back(read_value(v.element_type, field + "[" + std::to_string(k) + "]", depth + 1));
        }
        break;
      }
    }
    return v;
  }

  // ---- the file ---------------------------------------------------------------------
  void parse() {
    pos_ = 0;
    const auto magic = read<std::uint32_t>("magic");
    if (magic != kMagic) {
      fail_at(0, "magic", "the file does not start with \"GGUF\": not a GGUF file");
    }
    version_ = read<std::uint32_t>("version");
    if (version_ == 1) {
      fail(PLLM_ERROR_UNSUPPORTED, "offset 4: version: GGUF version 1 (32-bit counts) is not supported; "
                                   "re-convert the model with a current llama.cpp");
    }
    if (version_ != 2 && version_ != 3) {
      const std::uint32_t swapped = __builtin_bswap32(version_);
      if (swapped == 2 || swapped == 3) {
        fail(PLLM_ERROR_UNSUPPORTED, "offset 4: version: a big-endian GGUF file (version " +
                                         std::to_string(swapped) + "); only little-endian files are supported");
      }
      fail_at(4, "version", "unknown GGUF version " + std::to_string(version_) + " (2 and 3 are supported)");
    }
    std::uint64_t at = pos_;
    const auto n_tensors = read<std::uint64_t>("n_tensors");
    const std::uint64_t n_tensors_at = at;
    at = pos_;
    const auto n_kv = read<std::uint64_t>("n_kv");
    // A key-value pair takes at least 8 (key length) + 1 + 4 (type) + 1 bytes.
    check_count(at, n_kv, 14, kMaxMetadata, "n_kv");

    metadata_.reserve(static_cast<std::size_t>(n_kv));
    for (std::uint64_t k = 0; k < n_kv; ++k) {
      const std::string field = "metadata[" + std::to_string(k) + "]";
      std::string key = read_string(field + " key", kMaxNameBytes);
      if (key.empty()) fail_at(pos_ - 8, field + " key", "empty key");
      const std::string named = field + " '" + key + "'";
      if (metadata_index_.count(key)) fail_at(pos_ - 8 - key.size(), named, "the key appears twice");
      const ValueType type = read_value_type(named + " type");
      Value value = read_value(type, named, 0);
      metadata_index_.emplace(key, metadata_.size());
      metadata_.emplace_back(std::move(key), std::move(value));
    }
    if (const Value* a = find_metadata("general.alignment")) {
      if (a->type != ValueType::UINT32) {
        fail(PLLM_ERROR_INVALID_CONFIG, std::string("general.alignment is ") + value_type_name(a->type) +
                                            ", the spec makes it UINT32");
      }
      if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
        fail(PLLM_ERROR_INVALID_CONFIG, "general.alignment " + std::to_string(a->u) + " is not a power of two");
      }
      alignment_ = static_cast<std::uint32_t>(a->u);
    }

    // A tensor info takes at least 8 (name length) + 1 + 4 (n_dims) + 4 (type) + 8 (offset).
    check_count(n_tensors_at, n_tensors, 25, kMaxTensors, "n_tensors");
    tensors_.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t k = 0; k < n_tensors; ++k) read_tensor_info(k);

    // The data section starts at the next multiple of the alignment.
    const std::uint64_t end_of_infos = pos_;
    data_offset_ = end_of_infos + (alignment_ - end_of_infos % alignment_) % alignment_;
    if (tensors_.empty()) return;
    if (data_offset_ > size_) {
      fail_at(end_of_infos, "data section", "starts at byte " + std::to_string(data_offset_) +
                                                 " (aligned to " + std::to_string(alignment_) +
                                                 "), past the end of the file at " + std::to_string(size_) +
                                                 " (truncated?)");
    }
    const std::uint64_t data_size = size_ - data_offset_;
    std::vector<std::size_t> order(tensors_.size());
    for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
    for (TensorInfo& t : tensors_) {
      const std::string what = "tensor '" + t.name + "'";
      if (t.offset % alignment_ != 0) {
        fail(PLLM_ERROR_INVALID_CONFIG, what + ": offset " + std::to_string(t.offset) +
                                            " is not a multiple of the alignment " + std::to_string(alignment_));
      }
      if (t.offset > data_size || t.nbytes > data_size - t.offset) {
        fail(PLLM_ERROR_INVALID_CONFIG, what + ": bytes [" + std::to_string(t.offset) + ", +" +
                                            std::to_string(t.nbytes) + ") of the data section (at byte " +
                                            std::to_string(data_offset_) + ") run past its " +
                                            std::to_string(data_size) + " bytes (truncated?)");
      }
      t.data = bytes() + data_offset_ + t.offset;
      t.file = this;
    }
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (std::size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = tensors_[order[k - 1]];
      const TensorInfo& cur = tensors_[order[k]];
      if (cur.offset < prev.offset + prev.nbytes) {
        fail(PLLM_ERROR_INVALID_CONFIG, "tensor '" + cur.name + "' (bytes [" + std::to_string(cur.offset) + ", " +
                                            std::to_string(cur.offset + cur.nbytes) + ")) overlaps tensor '" +
                                            prev.name + "' (bytes [" + std::to_string(prev.offset) + ", " +
                                            std::to_string(prev.offset + prev.nbytes) + "))");
      }
    }
  }

  void read_tensor_info(std::uint64_t k) {
    const std::string field = "tensor_infos[" + std::to_string(k) + "]";
    TensorInfo t;
    t.name = read_string(field + " name", kMaxNameBytes);
    if (t.name.empty()) fail_at(pos_ - 8, field + " name", "empty name");
    const std::string named = field + " '" + t.name + "'";
    if (tensor_index_.count(t.name)) fail_at(pos_ - 8 - t.name.size(), named, "the name appears twice");
    std::uint64_t at = pos_;
    const auto n_dims = read<std::uint32_t>(named + " n_dims");
    if (n_dims > kMaxDims) {
      fail_at(at, named + " n_dims", std::to_string(n_dims) + " exceeds GGML_MAX_DIMS = " + std::to_string(kMaxDims));
    }
    std::uint64_t numel = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      at = pos_;
      const std::string dim_field = named + " dims[" + std::to_string(d) + "]";
      const auto extent = read<std::uint64_t>(dim_field);
      if (extent > std::uint64_t(INT64_MAX)) {
        fail_at(at, dim_field, std::to_string(extent) + " exceeds INT64_MAX");
      }
      if (__builtin_mul_overflow(numel, extent, &numel) || numel > std::uint64_t(INT64_MAX)) {
        fail_at(at, dim_field, "the product of the dimensions overflows");
      }
      t.dims.push_back(static_cast<std::int64_t>(extent));
    }
    at = pos_;
    const auto raw_type = read<std::uint32_t>(named + " type");
    const TypeTraits* traits = type_traits(raw_type);
    if (!traits) fail_at(at, named + " type", "unknown ggml type " + std::to_string(raw_type));
    t.type = static_cast<GgmlType>(raw_type);
    const std::uint64_t ne0 = n_dims ? std::uint64_t(t.dims[0]) : 1;
    if (ne0 % traits->block_size != 0) {
      fail_at(at, named + " type", std::string(traits->name) + " packs blocks of " +
                                       std::to_string(traits->block_size) + " elements, but dims[0] = " +
                                       std::to_string(ne0) + " is not a multiple");
    }
    // numel is a multiple of the block size because dims[0] is.
    if (__builtin_mul_overflow(numel / traits->block_size, std::uint64_t(traits->type_size), &t.nbytes)) {
      fail_at(at, named + " type", "the byte size overflows");
    }
    at = pos_;
    t.offset = read<std::uint64_t>(named + " offset");
    std::uint64_t end = 0;
    if (__builtin_add_overflow(t.offset, t.nbytes, &end)) {
      fail_at(at, named + " offset", std::to_string(t.offset) + " + " + std::to_string(t.nbytes) + " bytes overflows");
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  std::filesystem::path path_;
  MappedFile mapping_;
  std::uint64_t size_ = 0;
  std::uint64_t pos_ = 0;
  std::uint64_t array_values_ = 0;  // array elements parsed so far
  std::uint32_t version_ = 0;
  std::uint32_t alignment_ = kDefaultAlignment;
  std::uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, std::size_t, std::less<>> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

inline std::string TensorInfo::where() const {
  return (file ? file->path().string() : std::string("(no file)")) + ": tensor '" + name + "'";
}

inline void TensorInfo::to_f32(std::int64_t first, std::int64_t count, float* dst) const {
  const TypeTraits& traits = *type_traits(static_cast<std::uint32_t>(type));
  const std::int64_t block = traits.block_size;
  if (first < 0 || count < 0 || first > numel() || count > numel() - first || first % block || count % block) {
    throw Error(PLLM_ERROR_INVALID_ARGUMENT, where() + ": elements [" + std::to_string(first) + ", +" +
                                                 std::to_string(count) + ") are out of range for " +
                                                 std::to_string(numel()) + " or not whole blocks of " +
                                                 std::to_string(block));
  }
  if (count == 0) return;  // dst may be null
  if (!dequantize(type, data + (first / block) * traits.type_size, dst, count)) {
    throw Error(PLLM_ERROR_UNSUPPORTED, where() + ": type " + traits.name +
                                            " is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)");
  }
}

}  // namespace pllm::gguf
