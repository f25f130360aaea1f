#pragma once
// Tool calls in a chat model's output (server.tool_call_parser, vLLM's names; docs/server.md "Tool
// calling"): the text a model writes to call a function, parsed into OpenAI's tool_calls. The parse is
// incremental: content comes as it is written, a call opens once its name is known, and its arguments
// follow as the model writes them, so a stream carries them token by token. A piece that may be the start
// of a call is held back until the next piece shows what it is, or the end. Streamed and whole outputs
// parse the same way (the whole output's arguments are the streamed pieces joined).
//   hermes       Hermes / Qwen: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number; the
//                text before the first is content (an unterminated last block is parsed to the end).
//   llama3_json  Llama 3.x: the output (after an optional <|python_tag|>) is {"name": ..., "parameters":
//                {...}} ("arguments" taken too), several separated by ';'; an output that does not start
//                with '{' is content.
//   mistral      Mistral: [TOOL_CALLS] followed by a JSON list of {"name": ..., "arguments": {...}}, or
//                (v11 tokenizers on) by name[ARGS]{...}, each call after its own [TOOL_CALLS]; the text
//                before is content.
//   glm45        GLM-4.5/4.6/4.7: <tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>
//   qwen3_coder  Qwen3-Coder: <tool_call>\n<function=name>\n<parameter=k>\nv\n</parameter>\n</function>
//                \n</tool_call>. These two write values, not JSON: XmlToolCallParser (xml_tool_call_parser.h)
//                parses them, typing each value by the request's tool schemas (string values stream as they
//                come, other values whole).
// A call streams when its object starts with "name" and then its arguments' key (the order every model's
// template shows it): from the arguments' '{' on, the model's text is the arguments as written, up to the
// bracket that closes them, whether or not they parse (as with OpenAI's API, a client parses them). Any
// other call object (keys in another order, arguments given as a JSON string) is parsed once it is
// complete and becomes one piece, or content verbatim when it is no call. With calls_forced (tool_choice
// required or a named function: the output was constrained to calls) mistral's list may come without
// [TOOL_CALLS], a special token the constraint cannot write.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagedllm::server {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral, kGlm45, kQwen3Coder };

class XmlToolCallParser;

// "none", "hermes", "llama3_json", "mistral", "glm45", "qwen3_coder"; nullopt for another name.
std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name);
// The inverse: the format's name in server.tool_call_parser.
std::string_view tool_call_format_name(ToolCallFormat format);

// The format a chat template writes tool calls in, recognised by the marker it renders them with:
// <tool_call> with <arg_key> (glm45) or with <function= and <parameter= (qwen3_coder), else <tool_call>
// (hermes), <|python_tag|> or Meta's instruction to answer {"name": function name, "parameters": ...}
// (llama3_json: Llama 3.1 to 3.3) or [TOOL_CALLS] (mistral); nullopt when it shows none of them, or those of
// two formats.
std::optional<ToolCallFormat> tool_call_format_of_template(std::string_view chat_template);

// How a server parses tool calls: server.tool_call_parser, or with "auto" the chat template's format.
struct ToolCallParsing {
  ToolCallFormat format = ToolCallFormat::kNone;
  // Why there is no format when one is needed (auto, and the template shows none): then a request offering
  // tools is refused with this, rather than its calls returned as text. Empty otherwise.
  std::string missing;
};

// One piece of the calls: a call opening (its name, and perhaps the start of its arguments), or more of
// the arguments of the call opened last.
struct ToolCallPiece {
  bool opens = false;
  std::string name;       // when it opens
  std::string arguments;  // the next piece of the arguments' JSON text, as OpenAI's function.arguments
};

class ToolCallParser {
 public:
  struct Parts {
    std::string content;
    std::vector<ToolCallPiece> calls;
  };

  // `tool_definitions`: the request's tools (ChatTools::definitions), whose schemas type the values of the
  // formats that write values rather than JSON (glm45, qwen3_coder).
  ToolCallParser(ToolCallFormat format, bool calls_forced, const nlohmann::ordered_json& tool_definitions = nullptr);
  ~ToolCallParser();
  ToolCallParser(ToolCallParser&&) noexcept;
  ToolCallParser& operator=(ToolCallParser&&) noexcept;

  // The next piece of the output: the content and the pieces of calls it (with what was held back) makes.
  Parts add(std::string_view text);
  // The end of the output: what was held back.
  Parts finish();

  // Whether any call was opened so far.
  bool found_calls() const;

  // Tracks JSON brackets outside strings, one character at a time: where a value that starts with a bracket
  // ends. Whether it is valid JSON is not its concern.
  struct BracketScanner {
    int depth = 0;
    bool in_string = false;
    bool escaped = false;
    // Feeds the next character; true when it closes the outermost bracket.
    bool closes(char c);
  };

 private:
  enum class State {
    kLeading,      // llama3_json: whether the output (or what follows a call) starts with a call is not known yet
    kText,         // content, watching for the start of a call
    kCall,         // after a call's opening marker (or separator): its object, or mistral's list or name
    kMistralName,  // mistral v11: the name before [ARGS]
    kArguments,    // a call's arguments, handed on as they come
    kCallTail,     // after the arguments: the rest of the call's object, dropped
    kHermesEnd,    // hermes: what is left of the block up to </tool_call>, dropped
    kListNext,     // mistral: after a call in the list, ',' and the next call or ']'
    kPlain,        // content to the end
  };
  void settle(Parts& parts, bool at_end);
  // Hands text outside calls to `parts`; whitespace between or after calls is dropped.
  void emit_content(Parts& parts, std::string_view text);
  bool settle_leading(bool at_end);
  bool settle_text(Parts& parts, bool at_end);
  bool settle_call(Parts& parts, bool at_end);
  bool settle_whole_call(Parts& parts, bool at_end);
  bool settle_mistral_name(Parts& parts, bool at_end);
  bool settle_arguments(Parts& parts, bool at_end);
  bool settle_call_tail();
  bool settle_hermes_end(bool at_end);
  bool settle_list_next(bool at_end);
  // Opens a call: its name and the start of its arguments ("{}" for a call written without them).
  void open_call(Parts& parts, std::string name, std::string arguments);
  // What follows a call's end in this format.
  void after_call();
  // What was held from the call's marker on is no call: content, verbatim, to the end.
  void not_a_call();

  ToolCallFormat format_;
  State state_;
  bool found_calls_ = false;
  std::string held_;
  std::string opening_;  // the marker the call in progress followed: content again if the call does not parse
  bool in_mistral_list_ = false;     // mistral: inside [TOOL_CALLS]'s list
  bool content_after_call_ = false;  // content came after the last call (whitespace is content again)
  std::string pending_space_;        // whitespace right after a call, kept until text shows it is content
  BracketScanner scanner_;           // kArguments: the arguments' brackets; kCallTail: the call object's
  std::unique_ptr<XmlToolCallParser> xml_;  // glm45, qwen3_coder: the parse is its
};

}  // namespace pagedllm::server
