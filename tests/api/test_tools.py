"""Tool calling through the official openai client: tools rendered into the prompt byte for byte as
transformers renders them (the tool round trip checked by prompt ids against jinja2 + HF tokenizers), the
model's calls parsed by server.tool_call_parser into message.tool_calls and streamed as delta.tool_calls that
the client's stream helper assembles, and tool_choice "required" or a named function constraining decoding so
that the output always parses. The served model is random: a guided_choice makes it write one exact text,
and what is checked is how the server parses it."""

import json
from pathlib import Path

import openai
import pytest
from tokenizers import Tokenizer
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = Path(__file__).resolve().parents[2]
CHAT_TEMPLATES = ROOT / ".deps" / "chat-templates"
QWEN_TEMPLATE = CHAT_TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"
# The formats that write calls as XML, each with a real template of its family (llama.cpp's collection).
XML_TEMPLATES = {"glm45": CHAT_TEMPLATES / "GLM-4.6.jinja", "qwen3_coder": CHAT_TEMPLATES / "Qwen3-Coder.jinja"}

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                   "days": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather by city.",
                                      "parameters": WEATHER_SCHEMA}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
ASK = [{"role": "user", "content": "Weather in Paris and the time?"}]

# What each parser takes, for the same two calls, with content before them where the format has one.
CALLS = [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {})]
WRITTEN = {
    "hermes": ("Let me look.\n", "Let me look.\n<tool_call>\n" + "\n</tool_call>\n<tool_call>\n".join(
        json.dumps({"name": n, "arguments": a}) for n, a in CALLS) + "\n</tool_call>"),
    "llama3_json": (None, "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in CALLS)),
    "mistral": ("Looking.", "Looking.[TOOL_CALLS] " + json.dumps([{"name": n, "arguments": a} for n, a in CALLS])),
    # Mistral's v11 tokenizers on: each call after its own marker, its name bare, its arguments after [ARGS].
    "mistral v11": ("Looking.", "Looking." + "".join(f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a)}" for n, a in CALLS)),
}
PARSER = {"hermes": "hermes", "llama3_json": "llama3_json", "mistral": "mistral", "mistral v11": "mistral",
          "glm45": "glm45", "qwen3_coder": "qwen3_coder"}


def written_by_template(template, calls, tools=TOOLS):
    """What a model writes for `calls` after "Let me look.": its own chat template's rendering (jinja2) of that
    assistant turn, from the content to the end of the last call; and the content, the text before the first."""
    messages = ASK + [{"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, (name, arguments) in enumerate(calls)]}]
    text = render_jinja_template([messages], tools=tools, chat_template=template.read_text(),
                                 add_generation_prompt=False)[0][0]
    text = text[text.rindex("Let me look."):text.rindex("</tool_call>") + len("</tool_call>")]
    return text[:text.index("<tool_call>")], text


for _parser, _template in XML_TEMPLATES.items():
    WRITTEN[_parser] = written_by_template(_template, CALLS)


@pytest.fixture(scope="module")
def servers(start_server):
    started = {}

    def get(parser):
        if parser not in started:
            overrides = [f"server.tool_call_parser={parser}"]
            if parser == "hermes":
                overrides.append(f"model.chat_template='{QWEN_TEMPLATE}'")
            if parser in XML_TEMPLATES:
                overrides.append(f"model.chat_template='{XML_TEMPLATES[parser]}'")
            host = start_server(overrides)
            client = host.client()
            started[parser] = (host, client, client.models.list().data[0].id)
        return started[parser][1:]

    yield get
    for host, client, _ in started.values():
        client.close()
        assert host.stop() == 0, host.log()


def calls_of(tool_calls):
    return [(c.function.name, json.loads(c.function.arguments)) for c in tool_calls]


@pytest.mark.parametrize("written", sorted(WRITTEN))
def test_calls_parsed_whole_and_streamed(servers, written):
    parser = PARSER[written]
    client, model = servers(parser)
    content, text = WRITTEN[written]
    args = dict(model=model, messages=ASK, tools=TOOLS, max_tokens=300, temperature=0,
                extra_body={"guided_choice": [text]})

    choice = client.chat.completions.create(**args).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == content
    assert calls_of(choice.message.tool_calls) == CALLS
    ids = [c.id for c in choice.message.tool_calls]
    assert len(set(ids)) == 2 and all(c.type == "function" for c in choice.message.tool_calls)
    if parser == "mistral":
        assert all(len(i) == 9 and i.isalnum() for i in ids)  # what Mistral's templates take
    else:
        assert all(i.startswith("call_") for i in ids)

    # The client's own stream helper assembles the deltas: the arguments come token by token, and join to the
    # text the whole response has.
    arguments_fragments = 0
    with client.chat.completions.stream(**args) as stream:
        for event in stream:
            if event.type == "chunk" and event.chunk.choices:
                for call in event.chunk.choices[0].delta.tool_calls or []:
                    arguments_fragments += bool(call.function and call.function.arguments)
        final = stream.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls"
    assert (final.message.content or None) == content
    assert calls_of(final.message.tool_calls) == CALLS
    assert [c.function.arguments for c in final.message.tool_calls] == \
        [c.function.arguments for c in choice.message.tool_calls]
    assert arguments_fragments > 2 * len(CALLS)  # several pieces per call, not one block each


def test_parallel_tool_calls_false_returns_the_first_call(servers):
    client, model = servers("hermes")
    message = client.chat.completions.create(
        model=model, messages=ASK, tools=TOOLS, max_tokens=300, temperature=0, parallel_tool_calls=False,
        extra_body={"guided_choice": [WRITTEN["hermes"][1]]}).choices[0].message
    assert calls_of(message.tool_calls) == CALLS[:1]


@pytest.mark.parametrize("text", [
    "<tool_call>\n{\"name\": get_weather, \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "I would call get_weather, but I will not.",
], ids=["broken JSON", "plain text"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_output_that_does_not_parse_stays_content(servers, text, stream):
    client, model = servers("hermes")
    args = dict(model=model, messages=ASK, tools=TOOLS, max_tokens=300, temperature=0,
                extra_body={"guided_choice": [text]})
    if stream:
        with client.chat.completions.stream(**args) as s:
            for _ in s:
                pass
            choice = s.get_final_completion().choices[0]
    else:
        choice = client.chat.completions.create(**args).choices[0]
    assert choice.message.content == text
    assert not choice.message.tool_calls
    assert choice.finish_reason == "stop"


def test_tool_choice_none_leaves_the_output_unparsed(servers):
    client, model = servers("hermes")
    text = WRITTEN["hermes"][1]
    message = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="none",
                                             max_tokens=300, temperature=0,
                                             extra_body={"guided_choice": [text]}).choices[0].message
    assert message.content == text and not message.tool_calls


def test_a_tool_round_trip_renders_as_transformers_does(servers, serve_config):
    client, model = servers("hermes")
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"days\": 2, \"city\": \"Paris\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"sky\": \"clear\"}"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    ]
    response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=1,
                                              extra_body={"return_token_ids": True})
    # As vLLM hands them to the template: content null as "", arguments parsed, tools as model_dump()s them.
    expected_messages = [dict(m) for m in messages]
    expected_messages[1] = {"role": "assistant", "content": "", "tool_calls": [
        {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"] or "{}")}}
        for c in messages[1]["tool_calls"]]}
    tools = [{"type": "function", "function": {"name": t["function"]["name"],
                                               "description": t["function"].get("description"),
                                               "parameters": t["function"].get("parameters")}} for t in TOOLS]
    tiny = serve_config.parent / "tiny"
    special = json.loads((tiny / "tokenizer_config.json").read_text())
    text = render_jinja_template([expected_messages], tools=tools, chat_template=QWEN_TEMPLATE.read_text(),
                                 add_generation_prompt=True, bos_token=special["bos_token"],
                                 eos_token=special["eos_token"])[0][0]
    assert "<tool_response>\n12:00\n</tool_response>" in text and '"days": 2, "city": "Paris"' in text
    expected = Tokenizer.from_file(str(tiny / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    assert response.choices[0].prompt_token_ids == expected


@pytest.mark.parametrize("parser", sorted(set(PARSER.values())))
@pytest.mark.parametrize("choice", ["required", "named"])
def test_required_or_named_choice_always_parses(servers, parser, choice):
    client, model = servers(parser)
    tool_choice = "required" if choice == "required" else {"type": "function", "function": {"name": "get_weather"}}
    for seed in range(3):
        for stream in (False, True):
            # One call: a random model allowed several keeps calling until max_tokens.
            args = dict(model=model, messages=ASK, tools=TOOLS, tool_choice=tool_choice, max_tokens=1000,
                        temperature=1.0, seed=seed, parallel_tool_calls=False)
            if stream:
                with client.chat.completions.stream(**args) as s:
                    for _ in s:
                        pass
                    result = s.get_final_completion().choices[0]
            else:
                result = client.chat.completions.create(**args).choices[0]
            assert result.finish_reason == "tool_calls", result.message.content
            calls = calls_of(result.message.tool_calls)
            assert calls
            for name, arguments in calls:
                assert name in ({"get_weather", "get_time"} if choice == "required" else {"get_weather"})
                if name == "get_weather":
                    assert arguments["city"] in ("Paris", "Oslo") and 1 <= arguments["days"] <= 9
            assert len(calls) == 1


def test_tool_errors_are_400s_naming_the_field(client, model, servers):
    cases = [
        (dict(tools=[{"type": "function", "function": {"name": "get weather"}}]), "tools[0].function.name"),
        (dict(tools=[{"type": "retrieval"}]), "tools[0].type"),
        (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]),
         "tools[0].function.parameters.type"),
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_stock"}}),
         "tool_choice.function.name"),
        # server.tool_call_parser auto, and the tiny model's template shows no tool-call format.
        (dict(tools=TOOLS), "tools"),
        (dict(tools=TOOLS, tool_choice="required"), "tools"),
    ]
    for kwargs, param in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=model, messages=ASK, max_tokens=1, **kwargs)
        assert refused.value.body["param"] == param, refused.value.body
        if param == "tools":
            assert "server.tool_call_parser" in refused.value.body["message"], refused.value.body
    # Tools the output is not parsed for are still rendered with tool_choice "none".
    assert client.chat.completions.create(model=model, messages=ASK, max_tokens=1, tools=TOOLS,
                                          tool_choice="none").choices[0]
    # A schema that admits no output: refused at submit by the constraint plugin (forced calls compile the
    # schemas), naming the tool, not a request that fails later.
    hermes, hermes_model = servers("hermes")
    with pytest.raises(openai.BadRequestError) as refused:
        hermes.chat.completions.create(model=hermes_model, messages=ASK, max_tokens=1, tools=TOOLS,
                                       tool_choice="required", response_format={"type": "json_object"})
    assert refused.value.body["param"] == "tool_choice", refused.value.body
    looping = [{"type": "function", "function": {"name": "loop", "parameters": {"$ref": "#"}}}]
    with pytest.raises(openai.BadRequestError) as refused:
        hermes.chat.completions.create(model=hermes_model, messages=ASK, max_tokens=5, tools=looping,
                                       tool_choice="required")
    assert refused.value.body["param"] == "tools" and '"loop"' in refused.value.body["message"], refused.value.body
    # The servers serve on.
    assert client.chat.completions.create(model=model, messages=ASK, max_tokens=1).choices[0]
    assert hermes.chat.completions.create(model=hermes_model, messages=ASK, max_tokens=1).choices[0]


@pytest.mark.parametrize("setting", ["auto", "none"])
def test_the_parser_chosen_from_the_chat_template(start_server, setting):
    """tool_call_parser auto (the default) reads Qwen2.5's template, finds <tool_call>, parses as hermes and
    says so in the log; none renders the tools and leaves the output as content."""
    host = start_server([f"model.chat_template='{QWEN_TEMPLATE}'", "logging.level=info"] +
                        ([] if setting == "auto" else ["server.tool_call_parser=none"]))
    try:
        with host.client() as client:
            model = client.models.list().data[0].id
            text = WRITTEN["hermes"][1]
            message = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, max_tokens=300,
                                                     temperature=0,
                                                     extra_body={"guided_choice": [text]}).choices[0].message
        if setting == "auto":
            assert "tool calls: parsed as hermes (server.tool_call_parser auto, recognised in the chat template" \
                in host.log()
            assert calls_of(message.tool_calls) == CALLS
        else:
            assert message.content == text and not message.tool_calls
    finally:
        assert host.stop() == 0, host.log()


def test_a_parameters_type_list_with_object_is_taken_and_forced_calls_are_objects(servers):
    """type ["object", "null"] (what clients generate for optional arguments): offered, and a forced call's
    arguments are still an object, which the parser reads."""
    client, model = servers("hermes")
    tools = [{"type": "function", "function": {"name": "get_weather",
                                               "parameters": {**WEATHER_SCHEMA, "type": ["object", "null"]}}}]
    for seed in range(2):
        result = client.chat.completions.create(model=model, messages=ASK, tools=tools, tool_choice="required",
                                                max_tokens=1000, temperature=1.0, seed=seed,
                                                parallel_tool_calls=False).choices[0]
        assert result.finish_reason == "tool_calls", result.message.content
        [(name, arguments)] = calls_of(result.message.tool_calls)
        assert name == "get_weather" and arguments["city"] in ("Paris", "Oslo")
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=model, messages=ASK, max_tokens=1, tools=[
            {"type": "function", "function": {"name": "f", "parameters": {"type": ["array", "null"]}}}])
    assert refused.value.body["param"] == "tools[0].function.parameters.type", refused.value.body


def test_arguments_cut_off_by_max_tokens_come_as_written_whole_and_streamed(servers, serve_config):
    """A call cut off inside its arguments (finish_reason "length") returns the arguments written so far, the
    same whole and streamed: OpenAI's behaviour, the client parses them."""
    client, model = servers("hermes")
    text = WRITTEN["hermes"][1]
    args = dict(model=model, messages=ASK, tools=TOOLS, temperature=0, extra_body={"guided_choice": [text]})
    ids = client.chat.completions.create(**{**args, "extra_body": {"guided_choice": [text], "return_token_ids": True}},
                                         max_tokens=300).choices[0].token_ids
    # The first number of tokens whose text ends inside the first call's arguments, after '"city": "'.
    tokenizer = Tokenizer.from_file(str(serve_config.parent / "tiny" / "tokenizer.json"))
    opened = text.index('"arguments": ') + len('"arguments": ')
    cut = next(n for n in range(1, len(ids)) if len(tokenizer.decode(ids[:n], skip_special_tokens=False)) >
               text.index('"city": "') + len('"city": "'))
    written = tokenizer.decode(ids[:cut], skip_special_tokens=False)
    assert len(written) < text.index("}", opened)  # still inside the arguments

    choice = client.chat.completions.create(**args, max_tokens=cut).choices[0]
    assert choice.finish_reason == "length"
    [call] = choice.message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", written[opened:])
    # The stream helper refuses a completion cut by the length limit, so the chunks are joined here as it
    # joins them: by tool call index, the name from the opening chunk, the arguments appended.
    calls, finish_reason = {}, None
    for chunk in client.chat.completions.create(**args, max_tokens=cut, stream=True):
        choice_delta = chunk.choices[0]
        finish_reason = choice_delta.finish_reason or finish_reason
        for delta in choice_delta.delta.tool_calls or []:
            name, arguments = calls.get(delta.index, ("", ""))
            calls[delta.index] = (name + (delta.function.name or ""), arguments + (delta.function.arguments or ""))
    assert finish_reason == "length"
    assert list(calls.values()) == [("get_weather", written[opened:])]


@pytest.mark.parametrize("parser", sorted(XML_TEMPLATES))
def test_xml_calls_come_back_typed_by_the_schema(servers, parser):
    """GLM's and Qwen3-Coder's calls write values, not JSON: what the model's own template writes for a call
    (a string that looks like a number, an integer, an object, a boolean) comes back as the same arguments,
    each value typed by its parameter's schema, whole and streamed."""
    client, model = servers(parser)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {
        "code": {"type": "string"}, "count": {"type": "integer"}, "filters": {"type": "object"},
        "exact": {"type": "boolean"}, "note": {"type": ["string", "null"]}}}}}]
    calls = [("lookup", {"code": "007", "count": 3, "filters": {"tags": ["a", "b"], "max": 2.5}, "exact": True,
                         "note": "two\nlines <b>"})]
    content, text = written_by_template(XML_TEMPLATES[parser], calls, tools)
    args = dict(model=model, messages=ASK, tools=tools, max_tokens=300, temperature=0,
                extra_body={"guided_choice": [text]})
    choice = client.chat.completions.create(**args).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == content
    assert calls_of(choice.message.tool_calls) == calls
    with client.chat.completions.stream(**args) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion().choices[0]
    assert calls_of(final.message.tool_calls) == calls
    assert [c.function.arguments for c in final.message.tool_calls] == \
        [c.function.arguments for c in choice.message.tool_calls]


@pytest.mark.parametrize("template, parser", [("GLM-4.6.jinja", "glm45"), ("GLM-4.7-Flash.jinja", "glm45"),
                                              ("Qwen3-Coder.jinja", "qwen3_coder"), ("Qwen3.5-4B.jinja", "qwen3_coder")])
def test_xml_parsers_chosen_from_the_chat_template(start_server, template, parser):
    """tool_call_parser auto tells GLM's and Qwen3-Coder's templates from hermes (all write <tool_call>) by
    what they write inside it, and reads the calls each template writes (GLM-4.7's without newlines)."""
    content, text = written_by_template(CHAT_TEMPLATES / template, CALLS)
    host = start_server([f"model.chat_template='{CHAT_TEMPLATES / template}'", "logging.level=info"])
    try:
        with host.client() as client:
            model = client.models.list().data[0].id
            message = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, max_tokens=300,
                                                     temperature=0, extra_body={"guided_choice": [text]}
                                                     ).choices[0].message
        assert f"tool calls: parsed as {parser} (server.tool_call_parser auto" in host.log()
        assert calls_of(message.tool_calls) == CALLS
        assert message.content == content
    finally:
        assert host.stop() == 0, host.log()
