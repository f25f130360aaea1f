#include "core/tokenizer/bpe_model.h"

#include <queue>

#include <fmt/format.h>

#include "core/tokenizer/tokenizer_error.h"
#include "core/tokenizer/utf8.h"

namespace pagedllm::tokenizer {
namespace {

// Words longer than this are not cached (HF's limit); the cache stops growing
// at kCacheCapacity entries so memory stays bounded on adversarial input.
constexpr std::size_t kMaxCachedWordBytes = 256;
constexpr std::size_t kCacheCapacity = 100'000;

struct Symbol {
  TokenId id;
  int prev;
  int next;
  std::uint32_t length;  // bytes of the word this symbol covers; 0 once merged away
};

struct QueuedMerge {
  std::uint32_t rank;
  int position;
  TokenId merged;
  // std::priority_queue pops the largest: order so the lowest rank, then the
  // leftmost position, comes first.
  bool operator<(const QueuedMerge& other) const {
    if (rank != other.rank) return rank > other.rank;
    return position > other.position;
  }
};

std::pair<std::string, std::string> parse_merge(const Json& entry, const JsonPlace& place) {
  if (entry.is_string()) {
    const std::string& line = entry.get_ref<const std::string&>();
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      place.fail(fmt::format("merge '{}' must be two tokens separated by one space", line));
    }
    return {line.substr(0, space), line.substr(space + 1)};
  }
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
    return {entry[0].get<std::string>(), entry[1].get<std::string>()};
  }
  place.fail(R"(a merge must be "a b" or ["a", "b"])");
}

}  // namespace

BpeModel::BpeModel(Vocabulary vocabulary, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, const std::string& source)
    : vocabulary_(std::move(vocabulary)), options_(std::move(options)) {
  TokenId max_id = -1;
  for (const auto& [token, id] : vocabulary_) {
    if (id < 0 || id > kMaxTokenId) {
      throw TokenizerError(
          fmt::format("{}: vocab: token '{}' has id {}, outside 0..{}", source, token, id, kMaxTokenId));
    }
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<std::size_t>(max_id + 1));
  id_present_.resize(id_to_token_.size());
  for (const auto& [token, id] : vocabulary_) {
    id_to_token_[static_cast<std::size_t>(id)] = token;
    id_present_[static_cast<std::size_t>(id)] = true;
  }

  merges_.reserve(merges.size());
  const std::size_t prefix_length = options_.continuing_subword_prefix.size();
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    // Named references, not a structured binding: clang before 16 cannot capture one in a lambda.
    const std::string& left = merges[rank].first;
    const std::string& right = merges[rank].second;
    auto lookup = [&](const std::string& token) {
      const auto it = vocabulary_.find(token);
      if (it == vocabulary_.end()) {
        throw TokenizerError(fmt::format("{}: model.merges[{}]: token '{}' of merge '{} {}' is not in the vocabulary",
                                         source, rank, token, left, right));
      }
      return it->second;
    };
    const TokenId left_id = lookup(left);
    const TokenId right_id = lookup(right);
    if (right.size() < prefix_length) {
      throw TokenizerError(fmt::format("{}: model.merges[{}]: '{}' is shorter than continuing_subword_prefix",
                                       source, rank, right));
    }
    const TokenId merged_id = lookup(left + right.substr(prefix_length));
    // Later duplicates win, as in HF's map construction.
    merges_[pair_key(left_id, right_id)] = Merge{static_cast<std::uint32_t>(rank), merged_id};
  }

  if (options_.unk_token) {
    const auto it = vocabulary_.find(*options_.unk_token);
    if (it == vocabulary_.end()) {
      throw TokenizerError(fmt::format("{}: model.unk_token '{}' is not in the vocabulary", source, *options_.unk_token));
    }
    unk_id_ = it->second;
  }
  if (options_.byte_fallback) {
    std::vector<TokenId> bytes(256);
    bool complete = true;
    for (int b = 0; b < 256 && complete; ++b) {
      const auto it = vocabulary_.find(fmt::format("<0x{:02X}>", b));
      complete = it != vocabulary_.end();
      if (complete) bytes[static_cast<std::size_t>(b)] = it->second;
    }
    if (complete) byte_tokens_ = std::move(bytes);
  }
}

std::unique_ptr<BpeModel> BpeModel::from_json(const Json& value, const JsonPlace& place) {
  const std::optional<std::string> type = optional_string(value, "type", place);
  if (type && *type != "BPE") {
    (place / "type").fail(fmt::format("unsupported model type '{}' (only BPE is supported)", *type));
  }
  const auto dropout = value.find("dropout");
  if (dropout != value.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    (place / "dropout").fail("BPE dropout is not supported (it makes encoding random); set it to null");
  }

  const Json& vocab_json = require_field(value, "vocab", place);
  if (!vocab_json.is_object()) (place / "vocab").fail("expected an object of token -> id");
  Vocabulary vocabulary;
  vocabulary.reserve(vocab_json.size());
  for (const auto& [token, id] : vocab_json.items()) {
    vocabulary.emplace(token, require_token_id(id, place / "vocab" / token));
  }

  const auto merges_it = value.find("merges");
  if (merges_it == value.end() || !merges_it->is_array()) {
    place.fail("missing field 'merges' (a BPE model needs its merges list)");
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_it->size());
  for (std::size_t i = 0; i < merges_it->size(); ++i) {
    merges.push_back(parse_merge((*merges_it)[i], (place / "merges")[i]));
  }

  BpeOptions options;
  options.unk_token = optional_string(value, "unk_token", place);
  options.continuing_subword_prefix = optional_string(value, "continuing_subword_prefix", place).value_or("");
  options.end_of_word_suffix = optional_string(value, "end_of_word_suffix", place).value_or("");
  options.fuse_unk = optional_bool(value, "fuse_unk", false, place);
  options.byte_fallback = optional_bool(value, "byte_fallback", false, place);
  options.ignore_merges = optional_bool(value, "ignore_merges", false, place);
  return std::make_unique<BpeModel>(std::move(vocabulary), merges, std::move(options), place.file());
}

std::optional<TokenId> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocabulary_.find(token);
  if (it == vocabulary_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size() || !id_present_[static_cast<std::size_t>(id)]) {
    return nullptr;
  }
  return &id_to_token_[static_cast<std::size_t>(id)];
}

const BpeModel::Merge* BpeModel::find_merge(TokenId left, TokenId right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto it = vocabulary_.find(word); it != vocabulary_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (const auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) {
      cache_.emplace(std::string(word), std::vector<TokenId>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
    }
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<TokenId>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](TokenId id, std::size_t length) {
    const int index = static_cast<int>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, static_cast<std::uint32_t>(length)});
  };

  // HF's merge_word: one symbol per character (with prefix/suffix), unknown
  // characters as bytes (byte_fallback), then unk (fused or not), else dropped.
  // The unknown run not yet added: its byte length (0 when none).
  std::size_t pending_unk_length = 0;
  std::string decorated;
  for (std::size_t pos = 0; pos < word.size();) {
    const std::size_t length = std::min(utf8::sequence_length(static_cast<unsigned char>(word[pos])), word.size() - pos);
    const bool is_first = pos == 0;
    const bool is_last = pos + length == word.size();
    std::string_view piece = word.substr(pos, length);
    if ((!is_first && !options_.continuing_subword_prefix.empty()) || (is_last && !options_.end_of_word_suffix.empty())) {
      decorated.clear();
      if (!is_first) decorated += options_.continuing_subword_prefix;
      decorated += piece;
      if (is_last) decorated += options_.end_of_word_suffix;
      piece = decorated;
    }
    pos += length;

    if (const auto it = vocabulary_.find(piece); it != vocabulary_.end()) {
      if (pending_unk_length > 0) {
        add(*unk_id_, pending_unk_length);
        pending_unk_length = 0;
      }
      add(it->second, length);
      continue;
    }
    if (byte_tokens_) {
      for (const char byte : piece) add((*byte_tokens_)[static_cast<unsigned char>(byte)], 1);
      continue;
    }
    if (unk_id_) {
      if (pending_unk_length > 0 && options_.fuse_unk) {
        pending_unk_length += length;
      } else {
        if (pending_unk_length > 0) add(*unk_id_, pending_unk_length);
        pending_unk_length = length;
      }
    }
  }
  if (pending_unk_length > 0) add(*unk_id_, pending_unk_length);

  std::priority_queue<QueuedMerge> queue;
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* merge = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({merge->rank, static_cast<int>(i), merge->merged});
    }
  }
  while (!queue.empty()) {
    const QueuedMerge top = queue.top();
    queue.pop();
    Symbol& current = symbols[static_cast<std::size_t>(top.position)];
    if (current.length == 0 || current.next == -1) continue;
    const Symbol right = symbols[static_cast<std::size_t>(current.next)];
    // Skip entries made stale by earlier merges around this position.
    const Merge* still = find_merge(current.id, right.id);
    if (still == nullptr || still->merged != top.merged) continue;

    symbols[static_cast<std::size_t>(current.next)].length = 0;
    current.id = top.merged;
    current.length += right.length;
    current.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.position;

    if (current.prev >= 0) {
      const Symbol& previous = symbols[static_cast<std::size_t>(current.prev)];
      if (const Merge* merge = find_merge(previous.id, current.id)) {
        queue.push({merge->rank, current.prev, merge->merged});
      }
    }
    if (current.next >= 0) {
      const Symbol& next = symbols[static_cast<std::size_t>(current.next)];
      if (const Merge* merge = find_merge(current.id, next.id)) {
        queue.push({merge->rank, top.position, merge->merged});
      }
    }
  }
  for (const Symbol& symbol : symbols) {
    if (symbol.length != 0) out.push_back(symbol.id);
  }
}

}  // namespace pagedllm::tokenizer
