"""Reasoning output (server.reasoning_parser) through the official openai client: a chat answer's
<think>...</think> part comes back as message.reasoning_content, and streamed as delta.reasoning_content
deltas the client hands through. The served model is random, so a guided_choice makes it write one
exact text; what is checked is how the server splits it, against Python's own split of that text."""

import pytest

THOUGHT = "Two and two make four, carried over nothing."
ANSWER = "Four."
MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture(scope="module")
def reasoning_client(start_server):
    host = start_server(["server.reasoning_parser=deepseek_r1"])
    with host.client() as c:
        yield c, c.models.list().data[0].id
    assert host.stop() == 0, host.log()


@pytest.mark.parametrize("opened", [True, False], ids=["with <think>", "opened by the template"])
def test_reasoning_content_split_from_content(reasoning_client, opened):
    client, model = reasoning_client
    text = ("<think>" if opened else "") + THOUGHT + "</think>" + ANSWER
    args = dict(model=model, messages=MESSAGES, max_tokens=200, temperature=0, extra_body={"guided_choice": [text]})
    reasoning, _, content = text.removeprefix("<think>").partition("</think>")

    message = client.chat.completions.create(**args).choices[0].message
    assert (message.reasoning_content, message.content) == (reasoning, content)

    streamed_reasoning, streamed_content, pieces = "", "", 0
    for chunk in client.chat.completions.create(**args, stream=True):
        delta = chunk.choices[0].delta
        streamed_reasoning += getattr(delta, "reasoning_content", None) or ""
        streamed_content += delta.content or ""
        pieces += 1
    assert (streamed_reasoning, streamed_content) == (reasoning, content)
    assert pieces > 3  # token by token, not one block


def test_without_a_reasoning_parser_the_tags_are_content(client, model):
    text = "<think>" + THOUGHT + "</think>" + ANSWER
    message = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=200, temperature=0,
                                             extra_body={"guided_choice": [text]}).choices[0].message
    assert message.content == text
    assert getattr(message, "reasoning_content", None) is None
