#include "llama_common/weight_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "llama_common/gguf_dequantize.h"
#include "pagedllm/sdk/cpp/gguf.hpp"
#include "pagedllm/sdk/cpp/safetensors.hpp"

namespace pagedllm::llama {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class SafetensorsSource final : public WeightSource {
 public:
  SafetensorsSource(const std::filesystem::path& dir, const LlamaConfig& config) : checkpoint_(dir) {
    std::set<std::string, std::less<>> parts_of_int8;  // weight_scale, weight_packed, ... of int8 weights
    if (config.int8_checkpoint) {
      constexpr std::string_view kScale = ".weight_scale";
      for (const std::string& name : checkpoint_.names()) {
        if (name.ends_with(kScale)) add(int8_weight(name.substr(0, name.size() - kScale.size()), parts_of_int8));
      }
    }
    for (const std::string& name : checkpoint_.names()) {
      if (parts_of_int8.count(name)) continue;
      const pllm::safetensors::TensorView& view = *checkpoint_.find(name);
      SourceTensor t;
      t.name = name;
      t.shape = view.shape;
      t.nbytes = view.nbytes;
      t.where = view.where();
      if (pllm::is_float_dtype(view.dtype)) {
        t.dtype = view.dtype;
        t.data = view.data;
      } else {
        t.unreadable = t.where + ": is " + pllm::safetensors::dtype_name(view.dtype) +
                       (config.int8_checkpoint ? std::string(", but not an int8 weight with a '") + name +
                                                     "_scale' (compressed-tensors)"
                                               : std::string(", and config.json has no quantization_config saying "
                                                             "what it holds"));
      }
      t.convert = [&view](int64_t first, int64_t count, float* dst) { view.to_f32(first, count, dst); };
      add(std::move(t));
    }
  }

  const SourceTensor& require(std::string_view name, const std::vector<int64_t>& shape) const override {
    if (const SourceTensor* t = find(name); t && t->int8) {
      if (t->shape != shape) {
        refuse(PLLM_ERROR_INVALID_CONFIG,
               t->where + ": has shape " + shape_string(t->shape) + ", expected " + shape_string(shape));
      }
      return *t;
    }
    checkpoint_.require(name, shape);  // its messages name the file, the tensor and both shapes
    return *find(name);
  }

  std::string describe() const override {
    const std::size_t files = checkpoint_.files().size();
    return checkpoint_.files().front()->path().parent_path().string() + " (" + std::to_string(files) + " file" +
           (files == 1 ? "" : "s") + ")";
  }

 private:
  [[noreturn]] static void refuse(pllm_status status, const std::string& message) {
    throw pllm::Error(status, message);
  }

  // The compressed-tensors weight `<module>.weight`: I8 values (int-quantized,
  // naive-quantized) or I32 words of four values each (pack-quantized: byte j
  // of word w, little-endian, is column 4 w + j of the row, stored as q + 128;
  // each row padded to whole words; `weight_shape` holds the unpacked shape),
  // and `weight_scale`: one per row ([rows, 1] or [rows]) or one for the tensor.
  // The names it reads go into `parts`.
  SourceTensor int8_weight(const std::string& module, std::set<std::string, std::less<>>& parts) const {
    const pllm::safetensors::TensorView& scale = *checkpoint_.find(module + ".weight_scale");
    parts.insert(scale.name);
    for (const char* extra : {".weight_zero_point", ".weight_g_idx"}) {
      if (const auto* v = checkpoint_.find(module + extra)) {
        refuse(PLLM_ERROR_UNSUPPORTED, v->where() + ": zero points and act-order indices are not supported "
                                                    "(symmetric int8 weights only)");
      }
    }
    auto values = std::make_shared<Int8Values>();
    SourceTensor t;
    t.name = module + ".weight";
    if (const auto* q = checkpoint_.find(module + ".weight")) {
      if (q->dtype != PLLM_DTYPE_I8 || q->shape.size() != 2) {
        refuse(PLLM_ERROR_INVALID_CONFIG, q->where() + ": is " + pllm::safetensors::dtype_name(q->dtype) + " " +
                                              shape_string(q->shape) + "; a compressed-tensors int8 weight with a "
                                              "weight_scale is a 2-D I8 tensor");
      }
      parts.insert(q->name);
      t.shape = q->shape;
      t.where = q->where();
      t.nbytes = q->nbytes;
      const auto* data = reinterpret_cast<const int8_t*>(q->data);
      values->read = [data](int64_t first, int64_t count, int8_t* dst) {
        std::memcpy(dst, data + first, std::size_t(count));
      };
    } else if (const auto* packed = checkpoint_.find(module + ".weight_packed")) {
      const auto* shape = checkpoint_.find(module + ".weight_shape");
      if (!shape) refuse(PLLM_ERROR_NOT_FOUND, packed->where() + ": its '" + module + ".weight_shape' is missing");
      parts.insert(packed->name);
      parts.insert(shape->name);
      t.shape = packed_shape(*shape);
      const int64_t words = t.shape.size() == 2 ? (t.shape[1] + 3) / 4 : 0;
      if (packed->dtype != PLLM_DTYPE_I32 || packed->shape != std::vector<int64_t>{t.shape[0], words}) {
        refuse(PLLM_ERROR_INVALID_CONFIG, packed->where() + ": is " + pllm::safetensors::dtype_name(packed->dtype) +
                                              " " + shape_string(packed->shape) + ", expected I32 [" +
                                              std::to_string(t.shape[0]) + ", " + std::to_string(words) +
                                              "]: 8-bit values four to a word for weight_shape " +
                                              shape_string(t.shape));
      }
      t.where = packed->where();
      t.nbytes = packed->nbytes;
      const auto* bytes = reinterpret_cast<const uint8_t*>(packed->data);
      const int64_t cols = t.shape[1], row_bytes = words * 4;
      values->read = [bytes, cols, row_bytes](int64_t first, int64_t count, int8_t* dst) {
        for (int64_t i = 0; i < count; ++i) {
          const int64_t at = first + i;
          dst[i] = int8_t(int(bytes[(at / cols) * row_bytes + at % cols]) - 128);
        }
      };
    } else {
      refuse(PLLM_ERROR_NOT_FOUND, scale.where() + ": there is no '" + module + ".weight' (I8) nor '" + module +
                                       ".weight_packed' (I32) for it to scale");
    }
    const int64_t rows = t.shape[0];
    if (!pllm::is_float_dtype(scale.dtype) || (scale.numel() != rows && scale.numel() != 1) ||
        scale.shape.size() > 2 || (scale.shape.size() == 2 && scale.shape[1] != 1)) {
      refuse(PLLM_ERROR_UNSUPPORTED, scale.where() + ": is " + pllm::safetensors::dtype_name(scale.dtype) + " " +
                                         shape_string(scale.shape) + "; scales are float, one per row ([" +
                                         std::to_string(rows) + ", 1]) or one for the tensor (group-wise scales "
                                         "are not supported)");
    }
    std::vector<float> stored(std::size_t(scale.numel()));
    scale.to_f32(0, scale.numel(), stored.data());
    for (std::size_t r = 0; r < stored.size(); ++r) {
      if (!std::isfinite(stored[r])) {
        refuse(PLLM_ERROR_INVALID_CONFIG, scale.where() + ": element " + std::to_string(r) + " is not finite");
      }
    }
    values->row_scales = stored.size() == std::size_t(rows) ? stored : std::vector<float>(std::size_t(rows), stored[0]);
    t.nbytes += scale.nbytes;
    const int64_t cols = t.shape[1];
    t.convert = [values, cols](int64_t first, int64_t count, float* dst) {
      constexpr int64_t kPiece = 4096;
      int8_t q[kPiece];
      for (int64_t i = 0; i < count; i += kPiece) {
        const int64_t n = std::min(kPiece, count - i);
        values->read(first + i, n, q);
        for (int64_t j = 0; j < n; ++j) {
          dst[i + j] = float(q[j]) * values->row_scales[std::size_t((first + i + j) / cols)];
        }
      }
    };
    t.int8 = std::move(values);
    return t;
  }

  // pack-quantized's weight_shape: the unpacked [rows, cols], as I64 or I32.
  static std::vector<int64_t> packed_shape(const pllm::safetensors::TensorView& shape) {
    if ((shape.dtype != PLLM_DTYPE_I64 && shape.dtype != PLLM_DTYPE_I32) || shape.numel() != 2) {
      refuse(PLLM_ERROR_INVALID_CONFIG, shape.where() + ": is " + pllm::safetensors::dtype_name(shape.dtype) + " " +
                                            shape_string(shape.shape) + ", not the two dims of the unpacked weight");
    }
    std::vector<int64_t> dims(2);
    for (int i = 0; i < 2; ++i) {
      if (shape.dtype == PLLM_DTYPE_I64) {
        std::memcpy(&dims[std::size_t(i)], shape.data + 8 * i, 8);
      } else {
        int32_t d;
        std::memcpy(&d, shape.data + 4 * i, 4);
        dims[std::size_t(i)] = d;
      }
      if (dims[std::size_t(i)] <= 0 || dims[std::size_t(i)] > (int64_t(1) << 31)) {
        refuse(PLLM_ERROR_INVALID_CONFIG, shape.where() + ": dim " + std::to_string(dims[std::size_t(i)]) +
                                              " is out of range");
      }
    }
    return dims;
  }

  pllm::safetensors::Checkpoint checkpoint_;
};

// GGUF's name of HF tensor `hf` ("" when it has none) and back.
std::string gguf_name(std::string_view hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  constexpr std::string_view kLayers = "model.layers.";
  if (!hf.starts_with(kLayers)) return "";
  const std::string_view rest = hf.substr(kLayers.size());
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0) return "";
  const std::string_view layer = rest.substr(0, dot), member = rest.substr(dot + 1);
  static const std::pair<std::string_view, std::string_view> kMembers[] = {
      {"input_layernorm.weight", "attn_norm.weight"},   {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},     {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},       {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  for (const auto& [hf_member, gguf_member] : kMembers) {
    if (member == hf_member) return "blk." + std::string(layer) + "." + std::string(gguf_member);
  }
  return "";
}

std::string hf_name(std::string_view gguf) {
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  constexpr std::string_view kBlk = "blk.";
  if (!gguf.starts_with(kBlk)) return "";
  const std::string_view rest = gguf.substr(kBlk.size());
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0) return "";
  const std::string hf = "model.layers." + std::string(rest.substr(0, dot)) + ".";
  for (const char* member : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                             "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                             "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
    if (gguf_name(hf + member) == gguf) return hf + member;
  }
  return "";
}

pllm_dtype float_dtype(pllm::gguf::GgmlType type) {
  if (type == pllm::gguf::GgmlType::F32) return PLLM_DTYPE_F32;
  if (type == pllm::gguf::GgmlType::F16) return PLLM_DTYPE_F16;
  if (type == pllm::gguf::GgmlType::BF16) return PLLM_DTYPE_BF16;
  return PLLM_DTYPE_INVALID;
}

class GgufSource final : public WeightSource {
 public:
  GgufSource(const std::filesystem::path& path, const LlamaConfig& config) : file_(path) {
    for (const pllm::gguf::TensorInfo& info : file_.tensors()) {
      if (info.name == "rope_freqs.weight") continue;  // read into LlamaConfig's rope scaling
      const std::string hf = hf_name(info.name);
      SourceTensor t;
      t.name = hf.empty() ? info.name : hf;
      t.shape.assign(info.dims.rbegin(), info.dims.rend());
      t.dtype = float_dtype(info.type);
      t.nbytes = info.nbytes;
      t.where = info.where();
      // q and k rows are interleaved per head by llama.cpp's converter; 1-D tensors
      // and anything else are read as stored.
      int64_t permuted_heads = 0;
      if (hf.ends_with("self_attn.q_proj.weight")) permuted_heads = config.num_heads;
      if (hf.ends_with("self_attn.k_proj.weight")) permuted_heads = config.num_kv_heads;
      const int64_t width = info.dims.empty() ? 1 : info.dims[0];
      const int64_t rows = info.numel() / std::max<int64_t>(width, 1);
      if (permuted_heads > 0 && (rows % permuted_heads != 0 || (rows / permuted_heads) % 2 != 0)) {
        file_.fail(PLLM_ERROR_INVALID_CONFIG, "tensor '" + info.name + "' has " + std::to_string(rows) +
                                                  " rows, not an even number per head for " +
                                                  std::to_string(permuted_heads) + " heads");
      }
      t.data = t.dtype != PLLM_DTYPE_INVALID && permuted_heads == 0 ? info.data : nullptr;
      const pllm::gguf::TensorInfo* stored = &info;
      t.convert = [stored, width, permuted_heads](int64_t first, int64_t count, float* dst) {
        convert_rows(*stored, width, permuted_heads, first, count, dst);
      };
      if (const pllm::gguf::TypeTraits* traits = pllm::gguf::type_traits(uint32_t(info.type));
          traits && traits->block_size > 1) {
        t.ggml_type = uint32_t(info.type);
        const int64_t block = traits->block_size, block_bytes = traits->type_size;
        t.read_blocks = [stored, width, permuted_heads, block, block_bytes](int64_t row, int64_t first_col,
                                                                             int64_t cols, std::byte* dst) {
          const int64_t source_row = stored_row(*stored, width, permuted_heads, row);
          std::memcpy(dst, stored->data + (source_row * width + first_col) / block * block_bytes,
                      std::size_t(cols / block * block_bytes));
        };
      }
      stored_.emplace(t.name, stored);
      add(std::move(t));
    }
  }

  const SourceTensor& require(std::string_view name, const std::vector<int64_t>& shape) const override {
    const std::string stored = gguf_name(name);
    const std::string shown = stored.empty() ? std::string(name) + "'" : stored + "' (" + std::string(name) + ")";
    const SourceTensor* t = find(name);
    if (!t) file_.fail(PLLM_ERROR_NOT_FOUND, "tensor '" + shown + " is missing");
    if (t->shape != shape) {
      // GGUF lists dims innermost first: say both orders.
      std::vector<int64_t> dims(shape.rbegin(), shape.rend());
      file_.fail(PLLM_ERROR_INVALID_CONFIG, "tensor '" + shown + " has shape " + shape_string(t->shape) +
                                                ", expected " + shape_string(shape) + " (GGUF dims " +
                                                shape_string(dims) + ")");
    }
    // Refused here, before anything is allocated, rather than halfway through loading.
    const pllm::gguf::GgmlType type = stored_.at(t->name)->type;
    if (!can_dequantize_gguf(type)) {
      file_.fail(PLLM_ERROR_UNSUPPORTED, "tensor '" + shown + " is " + pllm::gguf::type_traits(uint32_t(type))->name +
                                             ", which is not dequantized (supported: F32, F16, BF16, Q8_0, Q4_0, "
                                             "Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)");
    }
    check_block_scales(file_, *stored_.at(t->name), shown);
    return *t;
  }

  std::string describe() const override { return file_.path().string() + " (GGUF)"; }

 private:
  // The GGUF row of HF row `row` of a [rows, width] tensor whose rows llama.cpp's
  // converter interleaved per head (permuted_heads > 0: q and k).
  static int64_t stored_row(const pllm::gguf::TensorInfo& info, int64_t width, int64_t permuted_heads, int64_t row) {
    if (permuted_heads <= 0) return row;
    const int64_t head_rows = info.numel() / width / permuted_heads, half = head_rows / 2;
    const int64_t head = row / head_rows, within = row % head_rows;
    return head * head_rows + 2 * (within % half) + within / half;
  }

  // Refuses a quantized tensor with a block scale (f16 d, and dmin / m where the
  // type has one) that is infinite or NaN, naming the tensor and the block: its
  // weights would be too, in any dtype.
  static void check_block_scales(const pllm::gguf::File& file, const pllm::gguf::TensorInfo& info,
                                 const std::string& shown) {
    using G = pllm::gguf::GgmlType;
    int scale_offsets[2] = {-1, -1};
    if (info.type == G::Q8_0 || info.type == G::Q4_0 || info.type == G::Q5_0 || info.type == G::IQ4_NL ||
        info.type == G::IQ4_XS) {
      scale_offsets[0] = 0;
    } else if (info.type == G::Q4_1 || info.type == G::Q5_1 || info.type == G::Q4_K || info.type == G::Q5_K) {
      scale_offsets[0] = 0;
      scale_offsets[1] = 2;
    } else if (info.type == G::Q2_K) {
      scale_offsets[0] = 80;
      scale_offsets[1] = 82;
    } else if (info.type == G::Q3_K) {
      scale_offsets[0] = 108;
    } else if (info.type == G::Q6_K) {
      scale_offsets[0] = 208;
    } else {
      return;
    }
    const pllm::gguf::TypeTraits& traits = *pllm::gguf::type_traits(uint32_t(info.type));
    const uint64_t blocks = info.nbytes / traits.type_size;
    for (uint64_t b = 0; b < blocks; ++b) {
      for (const int offset : scale_offsets) {
        if (offset < 0) continue;
        uint16_t bits;
        std::memcpy(&bits, info.data + b * traits.type_size + std::size_t(offset), 2);
        if ((bits & 0x7C00) == 0x7C00) {
          file.fail(PLLM_ERROR_INVALID_CONFIG, "tensor '" + shown + " (" + traits.name + ") block " +
                                                   std::to_string(b) + ": its f16 scale at byte " +
                                                   std::to_string(offset) + " is not finite");
        }
      }
    }
  }

  // GGUF row `row` of a [rows, width] tensor (its dims' and type's sizes checked by the reader) to f32.
  static void stored_row_to_f32(const pllm::gguf::TensorInfo& info, int64_t width, int64_t row, float* dst) {
    const pllm::gguf::TypeTraits& traits = *pllm::gguf::type_traits(uint32_t(info.type));
    const int64_t first_block = row * width / int64_t(traits.block_size);
    if (!dequantize_gguf(info.type, info.data + first_block * int64_t(traits.type_size), dst, width)) {
      info.file->fail(PLLM_ERROR_UNSUPPORTED, "tensor '" + info.name + "' is " + traits.name +
                                                  ", which is not dequantized");
    }
  }

  // HF elements [first, first + count) of a [rows, width] tensor: each HF row is
  // dequantized whole (quantized blocks never straddle rows: dims[0] is a multiple
  // of the block size) from the GGUF row it was permuted to.
  static void convert_rows(const pllm::gguf::TensorInfo& info, int64_t width, int64_t permuted_heads, int64_t first,
                           int64_t count, float* dst) {
    thread_local std::vector<float> row;
    row.resize(std::size_t(width));
    int64_t at = first;
    const int64_t end = first + count;
    while (at < end) {
      const int64_t column = at % width;
      const int64_t stored_row = GgufSource::stored_row(info, width, permuted_heads, at / width);
      const int64_t n = std::min(width - column, end - at);
      if (column == 0 && n == width) {
        stored_row_to_f32(info, width, stored_row, dst + (at - first));
      } else {
        stored_row_to_f32(info, width, stored_row, row.data());
        std::memcpy(dst + (at - first), row.data() + column, std::size_t(n) * sizeof(float));
      }
      at += n;
    }
  }

  pllm::gguf::File file_;
  std::map<std::string, const pllm::gguf::TensorInfo*, std::less<>> stored_;  // by HF name
};

}  // namespace

void SourceTensor::to_f32(int64_t first, int64_t count, float* dst) const {
  if (first < 0 || count < 0 || first > numel() || count > numel() - first) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, where + ": elements [" + std::to_string(first) + ", " +
                                                       std::to_string(first + count) + ") are out of range for " +
                                                       std::to_string(numel()));
  }
  if (count > 0) convert(first, count, dst);
}

const SourceTensor* WeightSource::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<std::string> WeightSource::names() const {
  std::vector<std::string> names;
  for (const SourceTensor& t : tensors_) names.push_back(t.name);
  return names;
}

void WeightSource::add(SourceTensor tensor) {
  if (index_.count(tensor.name)) {
    throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, tensor.where + ": a second tensor named '" + tensor.name + "'");
  }
  index_.emplace(tensor.name, tensors_.size());
  tensors_.push_back(std::move(tensor));
}

bool is_gguf_path(const std::filesystem::path& model_path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(model_path, ec);
}

std::unique_ptr<WeightSource> open_weight_source(const std::filesystem::path& model_path, const LlamaConfig& config) {
  if (is_gguf_path(model_path)) return std::make_unique<GgufSource>(model_path, config);
  return std::make_unique<SafetensorsSource>(model_path, config);
}

pllm_dtype auto_weight_dtype(const SourceTensor& embed) {
  return pllm::is_float_dtype(embed.dtype) ? embed.dtype : PLLM_DTYPE_F16;
}

}  // namespace pagedllm::llama
