// Component semantics that must match HF tokenizers exactly: split
// behaviors, Metaspace prepend schemes, ByteLevel, added-token matching
// (lstrip/rstrip/single_word/normalized/special), decoders, and errors.

#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/tokenizer/decoder.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/regex.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm::tokenizer {
namespace {

using Strings = std::vector<std::string>;

Strings pre_tokenize(const std::string& json, const std::vector<PreToken>& input) {
  const auto pre_tokenizer = make_pre_tokenizer(nlohmann::json::parse(json), JsonPlace("test", "pre_tokenizer"));
  std::vector<PreToken> pieces = input;
  pre_tokenizer->pre_tokenize(pieces);
  Strings out;
  for (const PreToken& piece : pieces) out.push_back(piece.text);
  return out;
}

Strings decode_chain(const std::string& json, Strings tokens) {
  make_decoder(nlohmann::json::parse(json), JsonPlace("test", "decoder"))->decode_chain(tokens);
  return tokens;
}

Strings split(const std::string& text, SplitBehavior behavior, bool invert = false) {
  const Regex dash("-", "test");
  Strings out;
  for (const TextRange& range : split_by_matches(text.size(), dash.find_all(text), behavior, invert)) {
    out.push_back(text.substr(range.begin, range.end - range.begin));
  }
  return out;
}

TEST_CASE("split behaviors follow HF's SplitDelimiterBehavior", "[tokenizer]") {
  // The examples of HF's documentation.
  const std::string text = "the-final--countdown";
  CHECK(split(text, SplitBehavior::kRemoved) == Strings{"the", "final", "countdown"});
  CHECK(split(text, SplitBehavior::kIsolated) == Strings{"the", "-", "final", "-", "-", "countdown"});
  CHECK(split(text, SplitBehavior::kMergedWithPrevious) == Strings{"the-", "final-", "-", "countdown"});
  CHECK(split(text, SplitBehavior::kMergedWithNext) == Strings{"the", "-final", "-", "-countdown"});
  CHECK(split(text, SplitBehavior::kContiguous) == Strings{"the", "-", "final", "--", "countdown"});
  CHECK(split(text, SplitBehavior::kRemoved, true) == Strings{"-", "-", "-"});
}

TEST_CASE("Metaspace prepend_scheme first/always/never and split", "[tokenizer]") {
  const auto metaspace = [](const char* scheme, bool split_pieces) {
    return fmt::format(R"({{"type":"Metaspace","replacement":"▁","prepend_scheme":"{}","split":{}}})", scheme,
                       split_pieces);
  };
  CHECK(pre_tokenize(metaspace("always", true), {{"Hello world", true}}) == Strings{"▁Hello", "▁world"});
  CHECK(pre_tokenize(metaspace("always", false), {{"Hello world", true}}) == Strings{"▁Hello▁world"});
  CHECK(pre_tokenize(metaspace("never", true), {{"Hello world", true}}) == Strings{"Hello", "▁world"});
  CHECK(pre_tokenize(metaspace("always", true), {{" Hello", true}}) == Strings{"▁Hello"});
  // "first" only prepends to the piece at the start of the input (not after an added token).
  CHECK(pre_tokenize(metaspace("first", true), {{"Hi", true}, {"there", false}}) == Strings{"▁Hi", "there"});
  CHECK(pre_tokenize(metaspace("always", true), {{"Hi", true}, {"there", false}}) == Strings{"▁Hi", "▁there"});
  // Legacy files: add_prefix_space without prepend_scheme.
  CHECK(pre_tokenize(R"({"type":"Metaspace","replacement":"▁","add_prefix_space":false})", {{"a b", true}}) ==
        Strings{"a", "▁b"});
}

TEST_CASE("ByteLevel pre-tokenizer: GPT-2 regex and byte-to-unicode table", "[tokenizer]") {
  const char* byte_level = R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true})";
  CHECK(pre_tokenize(byte_level, {{"Hello world's  end\n", true}}) ==
        Strings{"Hello", "Ġworld", "'s", "Ġ", "Ġend", "Ċ"});
  CHECK(pre_tokenize(byte_level, {{"é", true}}) == Strings{"Ã©"});
  CHECK(pre_tokenize(R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":false})", {{"Hi there", true}}) ==
        Strings{"ĠHiĠthere"});
  // Oniguruma's \s: U+180E (MONGOLIAN VOWEL SEPARATOR) is not whitespace, U+3000 is.
  CHECK(pre_tokenize(byte_level, {{"a\u3000b", true}}).size() == 3);
  CHECK(pre_tokenize(byte_level, {{"\xE1\xA0\x8E!", true}}).size() == 1);
}

TEST_CASE("Digits pre-tokenizer", "[tokenizer]") {
  CHECK(pre_tokenize(R"({"type":"Digits","individual_digits":true})", {{"a123b", true}}) ==
        Strings{"a", "1", "2", "3", "b"});
  CHECK(pre_tokenize(R"({"type":"Digits","individual_digits":false})", {{"a123b", true}}) ==
        Strings{"a", "123", "b"});
}

TEST_CASE("decoders: ByteFallback, Strip, Metaspace, ByteLevel, Replace", "[tokenizer]") {
  CHECK(decode_chain(R"({"type":"ByteFallback"})", {"<0xE4>", "<0xBD>", "<0xA0>", "a"}) == Strings{"你", "a"});
  // An invalid run becomes one U+FFFD per byte.
  CHECK(decode_chain(R"({"type":"ByteFallback"})", {"<0xE4>", "<0xBD>", "b"}) == Strings{"\uFFFD", "\uFFFD", "b"});
  CHECK(decode_chain(R"({"type":"Strip","content":" ","start":1,"stop":0})", {"  a ", "b"}) == Strings{" a ", "b"});
  CHECK(decode_chain(R"({"type":"Strip","content":" ","start":0,"stop":2})", {"a   "}) == Strings{"a "});
  CHECK(decode_chain(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always"})",
                     {"▁Hey", "▁▁friend", "▁a▁b"}) == Strings{"Hey", "  friend", " a b"});
  CHECK(decode_chain(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"never"})", {"▁Hey"}) ==
        Strings{" Hey"});
  CHECK(decode_chain(R"({"type":"ByteLevel"})", {"Ġhello", "Ċ", "Ã"}) == Strings{" hello\n\uFFFD"});
  // A token with chars outside the table keeps its own UTF-8.
  CHECK(decode_chain(R"({"type":"ByteLevel"})", {"a b", "Ġc"}) == Strings{"a b c"});
  CHECK(decode_chain(R"({"type":"Replace","pattern":{"String":"▁"},"content":" "})", {"▁a▁"}) == Strings{" a "});
  CHECK(decode_chain(R"({"type":"Sequence","decoders":[{"type":"Fuse"}]})", {"a", "b"}) == Strings{"ab"});
}

// A character-level tokenizer: every printable ASCII char is its own id.
std::string char_tokenizer_json(const std::string& added_tokens, const std::string& normalizer = "null") {
  nlohmann::json vocab = nlohmann::json::object();
  for (int c = 0x20; c < 0x7F; ++c) vocab[std::string(1, static_cast<char>(c))] = c;
  return fmt::format(R"({{"added_tokens":{},"normalizer":{},"pre_tokenizer":null,"decoder":null,
      "model":{{"type":"BPE","vocab":{},"merges":[]}}}})",
                     added_tokens, normalizer, vocab.dump());
}

std::vector<TokenId> chars(std::string_view text) { return {text.begin(), text.end()}; }

std::vector<TokenId> concat(std::initializer_list<std::vector<TokenId>> parts) {
  std::vector<TokenId> out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

TEST_CASE("added tokens: lstrip, rstrip, single_word, leftmost-longest, normalized", "[tokenizer]") {
  const std::string added = R"([
    {"id":200,"content":"<sp>","special":true,"normalized":false},
    {"id":201,"content":"[X]","special":false,"normalized":false,"lstrip":true,"rstrip":true},
    {"id":202,"content":"cat","special":false,"normalized":false,"single_word":true},
    {"id":203,"content":"ab","special":false,"normalized":false},
    {"id":204,"content":"abc","special":false,"normalized":false},
    {"id":205,"content":"HELLO","special":false,"normalized":true},
    {"id":206,"content":"<UP>","special":false,"normalized":false}])";
  const Tokenizer tokenizer =
      Tokenizer::from_json_text(char_tokenizer_json(added, R"({"type":"Lowercase"})"), "chars.json");

  CHECK(tokenizer.encode("q  [X]  r", false) == std::vector<TokenId>{'q', 201, 'r'});
  CHECK(tokenizer.encode("a cat b", false) == concat({chars("a "), {202}, chars(" b")}));
  CHECK(tokenizer.encode("concat", false) == chars("concat"));
  CHECK(tokenizer.encode("cats", false) == chars("cats"));
  CHECK(tokenizer.encode("cat.", false) == std::vector<TokenId>{202, '.'});
  // HF tests Rust regex's \w on either side, which includes '_'.
  CHECK(tokenizer.encode("_cat", false) == chars("_cat"));
  CHECK(tokenizer.encode("cat_", false) == chars("cat_"));
  CHECK(tokenizer.encode("xabcd", false) == std::vector<TokenId>{'x', 204, 'd'});
  CHECK(tokenizer.encode("xabd", false) == std::vector<TokenId>{'x', 203, 'd'});
  // normalized=true tokens match the normalized text; raw ones the raw text.
  CHECK(tokenizer.encode("say Hello", false) == concat({chars("say "), {205}}));
  CHECK(tokenizer.encode("<UP>", false) == std::vector<TokenId>{206});
  CHECK(tokenizer.encode("<up>", false) == chars("<up>"));
}

TEST_CASE("special tokens are never produced from user text unless asked", "[tokenizer]") {
  const Tokenizer tokenizer = Tokenizer::from_json_text(
      char_tokenizer_json(R"([{"id":200,"content":"<sp>","special":true,"normalized":false}])"), "chars.json");
  CHECK(tokenizer.encode("x<sp>y", false) == chars("x<sp>y"));
  CHECK(tokenizer.encode("x<sp>y", false, true) == std::vector<TokenId>{'x', 200, 'y'});
  CHECK(tokenizer.is_special(200));
  CHECK_FALSE(tokenizer.is_special('x'));
  // No decoder: HF joins token strings with spaces.
  CHECK(tokenizer.decode(std::vector<TokenId>{'a', 200, 'b'}) == "a <sp> b");
  CHECK(tokenizer.decode(std::vector<TokenId>{'a', 200, 'b'}, true) == "a b");
  // Unknown ids are dropped, as HF does.
  CHECK(tokenizer.decode(std::vector<TokenId>{'a', 999, -1}) == "a");
}

TEST_CASE("BPE options: continuing_subword_prefix, end_of_word_suffix, unk, byte_fallback", "[tokenizer][bpe]") {
  const Tokenizer suffixed = Tokenizer::from_json_text(R"({"model":{"type":"BPE",
      "vocab":{"a":0,"##b":1,"##c</w>":2,"a##b":3,"ab":4,"<unk>":5,"##b</w>":6},
      "merges":["a ##b"],"continuing_subword_prefix":"##","end_of_word_suffix":"</w>","unk_token":"<unk>"}})",
                                                       "prefix.json");
  // "a" + "##b" merges into vocab["ab"] (the prefix is dropped from the right side).
  CHECK(suffixed.encode("abc", false) == std::vector<TokenId>{4, 2});
  CHECK(suffixed.encode("ab", false) == std::vector<TokenId>{0, 6});
  CHECK(suffixed.encode("zz", false) == std::vector<TokenId>{5, 5});

  const Tokenizer fused = Tokenizer::from_json_text(
      R"({"model":{"type":"BPE","vocab":{"a":0,"<unk>":1},"merges":[],"unk_token":"<unk>","fuse_unk":true}})",
      "fuse.json");
  CHECK(fused.encode("azzaz", false) == std::vector<TokenId>{0, 1, 0, 1});

  nlohmann::json vocab = {{"a", 0}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = b + 1;
  const Tokenizer bytes = Tokenizer::from_json_text(
      fmt::format(R"({{"model":{{"type":"BPE","vocab":{},"merges":[],"byte_fallback":true}}}})", vocab.dump()),
      "bytes.json");
  CHECK(bytes.encode("aé", false) == std::vector<TokenId>{0, 0xC3 + 1, 0xA9 + 1});

  const Tokenizer dropped = Tokenizer::from_json_text(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]}})",
                                                      "plain.json");
  CHECK(dropped.encode("aza", false) == std::vector<TokenId>{0, 0});
}

void require_error(const std::string& json, const std::string& fragment) {
  INFO(json);
  try {
    (void)Tokenizer::from_json_text(json, "bad/tokenizer.json");
    FAIL("expected a TokenizerError mentioning: " << fragment);
  } catch (const TokenizerError& error) {
    const std::string message = error.what();
    INFO(message);
    CHECK(message.find("bad/tokenizer.json") != std::string::npos);
    CHECK(message.find(fragment) != std::string::npos);
  }
}

TEST_CASE("bad tokenizer files are clear errors naming the file", "[tokenizer]") {
  require_error(R"({"model": {"type": "BPE", "vocab": {}, )", "malformed JSON");
  require_error(R"({"version": 1E400, "model": {}})", "malformed JSON");  // out_of_range, not parse_error
  require_error(R"([1, 2])", "expected a JSON object");
  require_error(R"({"normalizer": null})", "missing field 'model'");
  require_error(R"({"model": {"type": "Unigram", "vocab": []}})", "unsupported model type 'Unigram'");
  require_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}}})", "missing field 'merges'");
  require_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})",
                "token 'b' of merge 'a b' is not in the vocabulary");
  require_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a a"]}})", "one space");
  require_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": 0.1}})", "dropout");
  require_error(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})", "expected an integer id");
  // Found by fuzz_tokenizer_load: one huge id sized the id -> token table at 66 GB; an id past 2^31 wrapped.
  require_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2000000000}, "merges": []}})",
                "model.vocab.b: id 2000000000 is outside 0..4194303");
  require_error(R"({"model": {"type": "BPE", "vocab": {"a": 4294967296}, "merges": []}})",
                "id 4294967296 is outside 0..4194303");
  require_error(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})", "id -1 is outside");
  require_error(R"({"added_tokens": [{"id": 4194304, "content": "<x>"}],
                    "model": {"type": "BPE", "vocab": {}, "merges": []}})",
                "missing 'id', or outside 0..4194303");
  // Found by fuzz_tokenizer_load: a template's special id past the vocabulary came out of encode().
  require_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                    "post_processor": {"type": "TemplateProcessing",
                      "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                      "special_tokens": {"<s>": {"id": "<s>", "ids": [1]}}}})",
                "post_processor: special token id 1 is neither in the vocabulary nor an added token");
  require_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                    "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 4294967296], "sep": ["a", 0]}})",
                "cls[1]: id 4294967296 is outside 0..4194303");
  require_error(R"({"model": {"type": "BPE", "vocab": {}, "merges": [], "unk_token": "<unk>"}})", "unk_token");
  require_error(R"({"normalizer": {"type": "BertNormalizer"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})",
                "unsupported normalizer 'BertNormalizer'");
  require_error(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated"},
                    "model": {"type": "BPE", "vocab": {}, "merges": []}})",
                "does not compile");
  require_error(R"({"decoder": {"type": "WordPiece"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})",
                "unsupported decoder");
  CHECK_THROWS_AS(Tokenizer::from_file("/nonexistent/tokenizer.json"), TokenizerError);
  CHECK_THROWS_AS(Tokenizer::from_model_dir("/nonexistent"), TokenizerError);
}

TEST_CASE("invalid UTF-8 in a prompt is a clear error", "[tokenizer]") {
  const Tokenizer tokenizer = Tokenizer::from_json_text(char_tokenizer_json("[]"), "chars.json");
  for (const std::string& bad : {std::string("abc\xFF"), std::string("abc\xC3"), std::string("abc\xED\xA0\x80"),
                                std::string("abc\xC0\xAF")}) {
    try {
      (void)tokenizer.encode(bad);
      FAIL("accepted invalid UTF-8");
    } catch (const TokenizerError& error) {
      CHECK(std::string(error.what()).find("invalid UTF-8 at byte 3") != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace pagedllm::tokenizer
