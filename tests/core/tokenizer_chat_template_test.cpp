// Chat template detection from real templates and the exact rendered text;
// tokenizer_config.json handling.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_error.h"
#include "tests/core/tokenizer_test_support.h"

namespace pagedllm::tokenizer {
namespace {

// Templates as the models ship them (tokenizer_config.json "chat_template").
constexpr const char* kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
constexpr const char* kMistralTemplate =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
    "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";
constexpr const char* kQwenTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
    "%}{{ '<|im_start|>assistant\\n' }}{% endif %}";
constexpr const char* kPlainChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

TokenizerConfig config_with(const char* jinja) {
  TokenizerConfig config;
  config.source = "model/tokenizer_config.json";
  config.chat_template_source = config.source;
  config.chat_template = jinja;
  config.bos_token = "<s>";
  config.eos_token = "</s>";
  return config;
}

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", " Hi! "}, {"assistant", "Hello."}, {"user", "2+2?"}};

TEST_CASE("a template that cannot be parsed is an error naming the file and line, an override replaces it",
          "[chat_template]") {
  TokenizerConfig config = config_with("{% for message in messages %}\n{{ message['content'] }}\n{% endfor");
  try {
    (void)ChatTemplate::from_config(config, std::nullopt);
    FAIL("accepted a broken template");
  } catch (const TokenizerError& error) {
    CHECK(std::string(error.what()).find("model/tokenizer_config.json") != std::string::npos);
    CHECK(std::string(error.what()).find("line 3") != std::string::npos);
  }
  const ChatTemplate chatml = ChatTemplate::from_config(config, ChatFormat::kChatMl);
  CHECK(chatml.render({{{"user", "Hi"}}}, true) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  config.chat_template.reset();
  CHECK_THROWS_AS(ChatTemplate::from_config(config, std::nullopt), TokenizerError);
  CHECK(parse_chat_format("llama3") == ChatFormat::kLlama3);
  CHECK_FALSE(parse_chat_format("vicuna").has_value());
}

TEST_CASE("any template runs, not only the known formats, and its errors name the template", "[chat_template]") {
  const ChatTemplate json_dump = ChatTemplate::from_config(config_with("{{ messages | tojson }}"), std::nullopt);
  CHECK(json_dump.render({{{"user", "Hi \"you\""}}}, true) == R"([{"role": "user", "content": "Hi \"you\""}])");
  const ChatTemplate broken = ChatTemplate::from_config(config_with("{{ messages[0].content.nope() }}"), std::nullopt);
  try {
    (void)broken.render({{{"user", "Hi"}}}, true);
    FAIL("rendered a call of an undefined method");
  } catch (const TokenizerError& error) {
    CHECK(std::string(error.what()).find("model/tokenizer_config.json") != std::string::npos);
    CHECK(std::string(error.what()).find("'str object' has no attribute 'nope'") != std::string::npos);
  }
}

TEST_CASE("rendered prompts are exactly the templates' output", "[chat_template]") {
  const ChatTemplate llama2 = ChatTemplate::from_config(config_with(kLlama2Template), std::nullopt);
  CHECK(llama2.render(kConversation, true) ==
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi! [/INST] Hello. </s><s>[INST] 2+2? [/INST]");

  const ChatTemplate mistral = ChatTemplate::from_config(config_with(kMistralTemplate), std::nullopt);
  const std::vector<ChatMessage> turns(kConversation.begin() + 1, kConversation.end());
  CHECK(mistral.render(turns, true) == "<s>[INST]  Hi!  [/INST]Hello.</s>[INST] 2+2? [/INST]");
  CHECK_THROWS_AS(mistral.render(kConversation, true), TokenizerError);

  const ChatTemplate qwen = ChatTemplate::from_config(config_with(kQwenTemplate), std::nullopt);
  CHECK(qwen.render(turns, true) ==
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n Hi! <|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  const ChatTemplate chatml = ChatTemplate::from_config(config_with(kPlainChatMlTemplate), std::nullopt);
  CHECK(chatml.render({{{"user", "Hi"}}}, false) == "<|im_start|>user\nHi<|im_end|>\n");
  // transformers cannot render an empty conversation; neither does pagedllm.
  CHECK_THROWS_AS(qwen.render({}, true), TokenizerError);

  TokenizerConfig llama3_config = config_with("");
  llama3_config.bos_token = "<|begin_of_text|>";
  const ChatTemplate llama3 = ChatTemplate::from_config(llama3_config, ChatFormat::kLlama3);
  CHECK(llama3.render(kConversation, true) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");

  const ChatTemplate zephyr = ChatTemplate::from_config(config_with(""), ChatFormat::kZephyr);
  CHECK(zephyr.render(kConversation, true) ==
        "<|system|>\nBe brief.</s>\n<|user|>\n Hi! </s>\n<|assistant|>\nHello.</s>\n<|user|>\n2+2?</s>\n"
        "<|assistant|>\n");
  CHECK(zephyr.render(kConversation, false).ends_with("2+2?</s>\n"));
}

TEST_CASE("rendering equals transformers' apply_chat_template on real families' templates", "[chat_template]") {
  // tests/fixtures/tokenizer/chat_templates.json: the templates as Llama 3, Llama 2,
  // Mistral, Qwen2, ChatML and Zephyr models publish them, rendered by transformers'
  // apply_chat_template with and without add_generation_prompt: the text (tokenize=False)
  // byte for byte, and its ids (tokenize=True) through the fixture's tokenizer.
  const auto json = testing::read_json(std::string(PAGEDLLM_SOURCE_DIR) + "/tests/fixtures/tokenizer/chat_templates.json");
  std::size_t rendered = 0;
  std::size_t refused = 0;
  for (const auto& family : json.at("families")) {
    TokenizerConfig config;
    config.source = config.chat_template_source = "tokenizer_config.json";
    config.chat_template = family.at("template").get<std::string>();
    if (!family.at("bos_token").is_null()) config.bos_token = family.at("bos_token").get<std::string>();
    if (!family.at("eos_token").is_null()) config.eos_token = family.at("eos_token").get<std::string>();
    const ChatTemplate chat = ChatTemplate::from_config(config, std::nullopt);
    const Tokenizer tokenizer = Tokenizer::from_model_dir(testing::fixture_dir(family.at("fixture").get<std::string>()));
    for (const auto& expected : family.at("cases")) {
      std::vector<ChatMessage> messages;
      for (const auto& message : expected.at("messages")) {
        messages.push_back({message.at("role").get<std::string>(), message.at("content").get<std::string>()});
      }
      const bool add_generation_prompt = expected.at("add_generation_prompt").get<bool>();
      INFO(family.at("family").get<std::string>() << ": " << expected.at("messages").dump()
                                                  << " add_generation_prompt=" << add_generation_prompt);
      if (expected.contains("error")) {
        // The template's raise_exception: pagedllm refuses the conversation too.
        CHECK_THROWS_AS(chat.render(messages, add_generation_prompt), TokenizerError);
        ++refused;
      } else {
        const std::string prompt = chat.render(messages, add_generation_prompt);
        CHECK(prompt == expected.at("text").get<std::string>());
        // apply_chat_template(tokenize=True): special tokens recognised, none added.
        CHECK(tokenizer.encode(prompt, false, true) == expected.at("ids").get<std::vector<TokenId>>());
        ++rendered;
      }
    }
  }
  CHECK(rendered >= 60);
  CHECK(refused >= 10);
}

TEST_CASE("a rendered Llama 3 prompt encodes its header tokens as special ids", "[chat_template][tokenizer]") {
  const Tokenizer tokenizer = Tokenizer::from_model_dir(testing::fixture_dir("bytelevel_llama3"));
  const ChatTemplate chat = ChatTemplate::from_config(tokenizer.config(), std::nullopt);
  const std::string prompt = chat.render({{{"user", "Hi"}}}, true);
  const std::vector<TokenId> ids = tokenizer.encode(prompt, false, true);
  const TokenId begin = *tokenizer.token_to_id("<|begin_of_text|>");
  const TokenId header = *tokenizer.token_to_id("<|start_header_id|>");
  REQUIRE(ids.size() > 4);
  CHECK(ids[0] == begin);
  CHECK(ids[1] == header);
  CHECK(tokenizer.decode(ids) == prompt);
}

TEST_CASE("tokenizer_config.json add_bos_token / add_eos_token rebuild the Llama template", "[tokenizer]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "pagedllm_tokenizer_config_test";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(testing::fixture_dir("spm_llama2") + "/tokenizer.json", dir / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  const auto write_config = [&](const std::string& json) { std::ofstream(dir / "tokenizer_config.json") << json; };

  const std::vector<TokenId> hello = Tokenizer::from_file((dir / "tokenizer.json").string()).encode("Hello", false);
  std::vector<TokenId> bos_hello_eos = {1};
  bos_hello_eos.insert(bos_hello_eos.end(), hello.begin(), hello.end());
  bos_hello_eos.push_back(2);

  write_config(R"({"tokenizer_class":"LlamaTokenizer","bos_token":{"content":"<s>","__type":"AddedToken"},
                   "eos_token":"</s>","add_bos_token":true,"add_eos_token":true})");
  CHECK(Tokenizer::from_model_dir(dir.string()).encode("Hello") == bos_hello_eos);

  write_config(R"({"tokenizer_class":"LlamaTokenizer","bos_token":"<s>","eos_token":"</s>","add_bos_token":false})");
  CHECK(Tokenizer::from_model_dir(dir.string()).encode("Hello") == hello);

  write_config(R"({"tokenizer_class":"LlamaTokenizer","bos_token":"<missing>"})");
  CHECK_THROWS_AS(Tokenizer::from_model_dir(dir.string()), TokenizerError);

  write_config(R"({"tokenizer_class": )");
  CHECK_THROWS_WITH(Tokenizer::from_model_dir(dir.string()), Catch::Contains("malformed JSON"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagedllm::tokenizer
