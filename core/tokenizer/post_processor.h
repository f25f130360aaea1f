#pragma once
// tokenizer.json "post_processor": the special tokens added around an encoded
// sequence when add_special_tokens is true (BOS/EOS).
//
// Supported: TemplateProcessing (single template: $A / $B pieces and special
// tokens), ByteLevel (no ids added), Sequence, BertProcessing ([CLS] $A [SEP])
// and RobertaProcessing (<s> $A </s>). Only single sequences are encoded.

#include <memory>
#include <string>
#include <vector>

#include "core/tokenizer/json_fields.h"
#include "core/tokenizer/token_id.h"

namespace pagedllm::tokenizer {

class PostProcessor {
 public:
  // The template for one sequence: special ids before and after it.
  PostProcessor(std::vector<TokenId> prefix, std::vector<TokenId> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}

  // Reads any supported post_processor; a null value adds nothing.
  static PostProcessor from_json(const Json& value, const JsonPlace& place);

  void apply(std::vector<TokenId>& ids) const;
  const std::vector<TokenId>& prefix() const { return prefix_; }
  const std::vector<TokenId>& suffix() const { return suffix_; }

 private:
  std::vector<TokenId> prefix_;
  std::vector<TokenId> suffix_;
};

}  // namespace pagedllm::tokenizer
