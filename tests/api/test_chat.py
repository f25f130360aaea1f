"""/v1/chat/completions through the official openai client: whole and streamed, usage,
max_completion_tokens, n > 1, stop strings, seeds, logprobs with top_logprobs."""

from conftest import MAX_MODEL_LEN

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
IGNORE_EOS = {"ignore_eos": True}


def greedy(model, **extra):
    return {"model": model, "messages": MESSAGES, "temperature": 0, **extra}


def test_answers_as_the_assistant_streamed_and_not_with_the_same_text(server, client, model):
    whole = client.chat.completions.create(**greedy(model, max_tokens=10, extra_body=IGNORE_EOS))
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 10
    # The prompt the server counts is the chat template's rendering.
    with server.http() as http:
        rendered = http.post("/tokenize", json={"messages": MESSAGES, "add_generation_prompt": True}).json()
    assert whole.usage.prompt_tokens == rendered["count"]
    assert whole.usage.total_tokens == rendered["count"] + 10
    chunks = list(client.chat.completions.create(**greedy(model, max_tokens=10, extra_body=IGNORE_EOS, stream=True,
                                                          stream_options={"include_usage": True})))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == whole.choices[0].message.content
    assert chunks[-2].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-2])
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == 10
    assert all(c.usage is None and c.id == chunks[-1].id for c in chunks[:-1])


def test_uses_max_completion_tokens_and_n(client, model):
    r = client.chat.completions.create(**greedy(model, max_completion_tokens=3, n=2, extra_body=IGNORE_EOS))
    assert len(r.choices) == 2
    assert [c.index for c in r.choices] == [0, 1]
    assert r.usage.completion_tokens == 6
    # max_completion_tokens wins over max_tokens.
    r = client.chat.completions.create(**greedy(model, max_completion_tokens=2, max_tokens=9, extra_body=IGNORE_EOS))
    assert r.usage.completion_tokens == 2


def test_streams_n_choices_each_with_its_role_and_finish(client, model):
    whole = client.chat.completions.create(**greedy(model, max_tokens=5, n=2, extra_body=IGNORE_EOS))
    chunks = list(client.chat.completions.create(**greedy(model, max_tokens=5, n=2, extra_body=IGNORE_EOS,
                                                          stream=True)))
    for index in (0, 1):
        mine = [c.choices[0] for c in chunks if c.choices[0].index == index]
        assert mine[0].delta.role == "assistant"
        assert "".join(c.delta.content or "" for c in mine) == whole.choices[index].message.content
        assert [c.finish_reason for c in mine].count("length") == 1
        assert mine[-1].finish_reason == "length"


def test_ends_at_a_stop_string(client, model):
    text = client.chat.completions.create(**greedy(model, max_tokens=20, extra_body=IGNORE_EOS)).choices[0]
    text = text.message.content
    stop = text[3:5]
    assert len(stop) == 2, f"greedy reply too short for a stop string: {text!r}"
    stopped = client.chat.completions.create(**greedy(model, max_tokens=20, extra_body=IGNORE_EOS, stop=[stop]))
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == text[:text.index(stop)]


def test_seeds_reproduce_and_differ(client, model):
    params = {"model": model, "messages": MESSAGES, "max_tokens": 16, "temperature": 1.0, "extra_body": IGNORE_EOS}
    a = client.chat.completions.create(**params, seed=11).choices[0].message.content
    b = client.chat.completions.create(**params, seed=11).choices[0].message.content
    c = client.chat.completions.create(**params, seed=12).choices[0].message.content
    assert a == b
    assert a != c
    streamed = client.chat.completions.create(**params, seed=11, stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed) == a


def test_logprobs_with_bytes_and_sorted_alternatives(client, model):
    r = client.chat.completions.create(**greedy(model, max_tokens=4, logprobs=True, top_logprobs=3,
                                                extra_body=IGNORE_EOS))
    content = r.choices[0].logprobs.content
    assert len(content) == 4
    assert "".join(entry.token for entry in content) == r.choices[0].message.content
    for entry in content:
        assert isinstance(entry.token, str)
        assert entry.bytes == list(entry.token.encode("utf-8"))
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        for i in range(1, 3):
            assert entry.top_logprobs[i - 1].logprob >= entry.top_logprobs[i].logprob
        assert abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-5
        assert entry.top_logprobs[0].token == entry.token

    # Streamed, the same entries arrive spread over the chunks.
    chunks = client.chat.completions.create(**greedy(model, max_tokens=4, logprobs=True, top_logprobs=3,
                                                     extra_body=IGNORE_EOS, stream=True))
    streamed = [entry for c in chunks if c.choices and c.choices[0].logprobs for entry in c.choices[0].logprobs.content]
    assert [(e.token, e.bytes) for e in streamed] == [(e.token, e.bytes) for e in content]
    for s, w in zip(streamed, content):
        assert abs(s.logprob - w.logprob) < 1e-5
        assert [t.token for t in s.top_logprobs] == [t.token for t in w.top_logprobs]


def test_unset_max_tokens_runs_to_the_context_limit(client, model):
    r = client.chat.completions.create(**greedy(model, extra_body=IGNORE_EOS))
    assert r.choices[0].finish_reason == "length"
    assert r.usage.total_tokens == MAX_MODEL_LEN
