"""Structured output through the official openai client: response_format json_schema and
json_object on chat and completions, vLLM's structured_outputs / guided_regex / guided_choice,
and 400s naming the field for malformed or uncompilable constraints. The served model is random
(tiny), so whatever it emits is the grammar's doing: each output is checked by an independent
validator (jsonschema, Python's re), not by the engine's own code."""

import json
import re

import jsonschema
import openai
import pytest

# Bounded everywhere (string lengths, integer range, enum, array size, no extra properties), so
# every output the grammar allows ends within max_tokens even on a random model.
PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        # (xgrammar 0.2.8 ignores minLength/maxLength beside a pattern: docs/structured-output.md)
        "name": {"type": "string", "pattern": "^[A-Za-z]{1,8}$"},
        "nick": {"type": "string", "minLength": 2, "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    },
    "required": ["name", "nick", "age", "role", "tags"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True}}
MESSAGES = [{"role": "user", "content": "Describe a person as JSON."}]
MAX_TOKENS = 400
SEEDS = range(4)


def finished_text(choice):
    assert choice.finish_reason == "stop", f"did not finish within {MAX_TOKENS} tokens: {choice!r}"
    return choice.message.content if hasattr(choice, "message") else choice.text


def test_chat_response_format_json_schema_outputs_validate(client, model):
    texts = set()
    for seed in SEEDS:
        r = client.chat.completions.create(model=model, messages=MESSAGES, response_format=RESPONSE_FORMAT,
                                           max_tokens=MAX_TOKENS, temperature=1.0, seed=seed)
        text = finished_text(r.choices[0])
        jsonschema.validate(json.loads(text), PERSON_SCHEMA)
        texts.add(text)
    assert len(texts) > 1, "different seeds should give different objects"


def test_chat_json_schema_streamed_equals_whole_and_n_sequences_each_validate(client, model):
    args = dict(model=model, messages=MESSAGES, response_format=RESPONSE_FORMAT, max_tokens=MAX_TOKENS,
                temperature=1.0, seed=11)
    whole = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(**args, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == finished_text(whole.choices[0])
    several = client.chat.completions.create(**args, n=3)
    assert len(several.choices) == 3
    for choice in several.choices:
        jsonschema.validate(json.loads(finished_text(choice)), PERSON_SCHEMA)


def test_completions_response_format_and_structured_outputs_json(client, model):
    for extra in ({"response_format": RESPONSE_FORMAT}, {"structured_outputs": {"json": PERSON_SCHEMA}},
                  {"guided_json": json.dumps(PERSON_SCHEMA)}):
        r = client.completions.create(model=model, prompt="Person:", max_tokens=MAX_TOKENS, temperature=0.9,
                                      seed=3, extra_body=extra)
        jsonschema.validate(json.loads(finished_text(r.choices[0])), PERSON_SCHEMA)


def test_json_object_outputs_are_objects(client, model):
    # Any JSON object: unbounded, so a random model may not close it within max_tokens. Every output
    # that ends ("stop") must parse as an object, and most of these seeds do end.
    ended = 0
    for seed in range(6):
        r = client.chat.completions.create(model=model, messages=MESSAGES, response_format={"type": "json_object"},
                                           max_tokens=MAX_TOKENS, temperature=0.7, seed=seed)
        choice = r.choices[0]
        assert choice.message.content.lstrip().startswith("{")
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict)
            ended += 1
    assert ended >= 3


def test_regex_and_choice_outputs_match(client, model):
    pattern = r"[a-z]{3}-[0-9]{2,4}(\.[A-Z])?"
    for extra in ({"guided_regex": pattern}, {"structured_outputs": {"regex": pattern}}):
        for seed in SEEDS:
            r = client.completions.create(model=model, prompt="Code:", max_tokens=20, temperature=1.0, seed=seed,
                                          extra_body=extra)
            assert re.fullmatch(pattern, finished_text(r.choices[0])), r.choices[0].text
    choices = ["red", "green", "blue", "dark \"grey\"\n"]
    seen = set()
    for extra in ({"guided_choice": choices}, {"structured_outputs": {"choice": choices}}):
        for seed in range(8):
            r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=20, temperature=1.0,
                                               seed=seed, extra_body=extra)
            text = finished_text(r.choices[0])
            assert text in choices
            seen.add(text)
    assert len(seen) > 1


def test_greedy_constrained_output_is_deterministic_and_logprobs_are_of_allowed_tokens(client, model):
    args = dict(model=model, messages=MESSAGES, max_tokens=20, temperature=0, extra_body={"guided_choice": ["yes", "no"]},
                logprobs=True, top_logprobs=3)
    a = client.chat.completions.create(**args)
    b = client.chat.completions.create(**args)
    assert a.choices[0].message.content == b.choices[0].message.content in ("yes", "no")
    # The mask applies before the logprobs (sdk/sampler.h): the first token and every alternative with a
    # finite logprob start "yes" or "no".
    # (The server reports -inf as OpenAI does, -9999.0.)
    first = a.choices[0].logprobs.content[0]
    assert first.logprob > -9999.0
    for alternative in [first, *first.top_logprobs]:
        if alternative.logprob > -9999.0:
            assert "yes".startswith(alternative.token) or "no".startswith(alternative.token), alternative


def bad_request(create, param, message_part, **kwargs):
    with pytest.raises(openai.BadRequestError) as e:
        create(**kwargs)
    body = e.value.body
    assert body["param"] == param, body
    assert message_part in body["message"], body


def test_400_naming_the_field_for_bad_constraints(client, model):
    chat = client.chat.completions.create
    base = dict(model=model, messages=MESSAGES, max_tokens=5)
    bad_request(chat, "response_format.type", "xml", **base, response_format={"type": "xml"})
    bad_request(chat, "response_format.json_schema", "required", **base, response_format={"type": "json_schema"})
    bad_request(chat, "response_format.json_schema.schema", "required", **base,
                response_format={"type": "json_schema", "json_schema": {"name": "x"}})
    bad_request(chat, "response_format.json_schema.schema", "response_format.json_schema.schema", **base,
                response_format={"type": "json_schema", "json_schema": {
                    "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "no-such-type"}}}}})
    # A schema no output can match (its $ref refers only to itself): a 400 at submit, not a 500 later.
    bad_request(chat, "response_format.json_schema.schema", "no output can match it", **base,
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#"}}})
    bad_request(chat, "guided_regex", "guided_regex", **base, extra_body={"guided_regex": "(unclosed"})
    bad_request(chat, "structured_outputs.regex", "structured_outputs.regex", **base,
                extra_body={"structured_outputs": {"regex": "a{3"}})
    bad_request(chat, "guided_choice", "must be a non-empty array", **base, extra_body={"guided_choice": []})
    bad_request(chat, "guided_choice[1]", "non-empty string", **base, extra_body={"guided_choice": ["a", 5]})
    bad_request(chat, "guided_regex", "both constrain", **base, response_format={"type": "json_object"},
                extra_body={"guided_regex": "a+"})
    bad_request(chat, "structured_outputs.grammar", "not supported", **base,
                extra_body={"structured_outputs": {"grammar": "root ::= \"a\""}})
    # The server keeps serving after each.
    r = chat(**base, extra_body={"guided_choice": ["ok"]})
    assert r.choices[0].message.content == "ok"
