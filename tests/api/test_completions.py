"""/v1/completions and the side routes through the official openai client: whole and
streamed, usage, token-id and batched prompts, stop strings, n > 1, seeds, logprobs, echo."""

import re

from conftest import MAX_MODEL_LEN


def greedy(model, **extra):
    return {"model": model, "temperature": 0, **extra}


def tokenize(server, body):
    with server.http() as http:
        response = http.post("/tokenize", json=body)
    assert response.status_code == 200, response.text
    return response.json()


# ---- models and the side routes -------------------------------------------------------

def test_lists_the_served_model(client, model):
    models = client.models.list()
    assert len(models.data) == 1
    assert models.data[0].object == "model"
    assert client.models.retrieve(model).id == model


def test_side_routes_answer_without_a_key(server):
    with server.http() as http:
        assert http.get("/health").status_code == 200
        assert re.fullmatch(r"\d+\.\d+\.\d+", http.get("/version").json()["version"])
        metrics = http.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert "# TYPE pagedllm:time_to_first_token_seconds histogram" in metrics.text
        tokens = http.post("/tokenize", json={"prompt": "Hello world"}).json()
        assert tokens["count"] == len(tokens["tokens"])
        assert tokens["max_model_len"] == MAX_MODEL_LEN
        text = http.post("/detokenize", json={"tokens": tokens["tokens"]}).json()
        assert text["prompt"].endswith("Hello world")


# ---- completions ----------------------------------------------------------------------

def test_whole_completion_with_usage_greedy_is_deterministic(server, client, model):
    prompt = "The capital of France is"
    a = client.completions.create(**greedy(model, prompt=prompt, max_tokens=8))
    assert a.object == "text_completion"
    assert a.model == model
    assert len(a.choices) == 1
    assert a.choices[0].finish_reason == "length"
    assert isinstance(a.choices[0].text, str)
    assert a.usage.completion_tokens == 8
    assert a.usage.prompt_tokens > 0
    assert a.usage.prompt_tokens == tokenize(server, {"prompt": prompt})["count"]
    assert a.usage.total_tokens == a.usage.prompt_tokens + 8
    b = client.completions.create(**greedy(model, prompt=prompt, max_tokens=8))
    assert b.choices[0].text == a.choices[0].text


def test_streams_the_same_text_then_the_usage_chunk(client, model):
    whole = client.completions.create(**greedy(model, prompt="Once upon a time", max_tokens=12))
    chunks = list(client.completions.create(**greedy(model, prompt="Once upon a time", max_tokens=12, stream=True,
                                                     stream_options={"include_usage": True})))
    usage = chunks[-1]
    assert usage.choices == []
    assert usage.usage.completion_tokens == 12
    assert usage.usage.prompt_tokens == whole.usage.prompt_tokens
    text_chunks = chunks[:-1]
    assert text_chunks
    assert all(c.usage is None and c.id == usage.id for c in text_chunks)
    assert "".join(c.choices[0].text for c in text_chunks) == whole.choices[0].text
    assert text_chunks[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in text_chunks[:-1])


def test_stream_without_include_usage_has_no_usage_chunk(client, model):
    chunks = list(client.completions.create(**greedy(model, prompt="Once upon a time", max_tokens=5, stream=True)))
    assert chunks
    assert all(len(c.choices) == 1 and c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_return_token_ids_streams_every_token_with_its_ids(client, model):
    # vLLM's return_token_ids: what pagedllm-bench times tokens by (a token whose text is held back still arrives).
    body = greedy(model, prompt=[5, 6, 7, 8], max_tokens=12, extra_body={"return_token_ids": True})
    whole = client.completions.create(**body).choices[0].model_dump()
    assert whole["prompt_token_ids"] == [5, 6, 7, 8]
    assert len(whole["token_ids"]) == 12
    chunks = [c.choices[0].model_dump() for c in client.completions.create(**body, stream=True)]
    assert all(c["token_ids"] for c in chunks)  # no chunk without tokens, text or not
    assert [i for c in chunks for i in c["token_ids"]] == whole["token_ids"]
    assert chunks[0]["prompt_token_ids"] == [5, 6, 7, 8]
    assert all(c["prompt_token_ids"] is None for c in chunks[1:])
    assert "".join(c["text"] for c in chunks) == whole["text"]
    plain = client.completions.create(**greedy(model, prompt=[5, 6, 7, 8], max_tokens=2)).choices[0].model_dump()
    assert "token_ids" not in plain


def test_token_ids_and_batches_choices_are_prompt_major(client, model):
    ids = client.completions.create(**greedy(model, prompt=[959, 10, 20, 30], max_tokens=3))
    assert ids.usage.prompt_tokens == 4
    batch = client.completions.create(**greedy(model, prompt=["one", "two"], n=2, max_tokens=3))
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert batch.usage.completion_tokens == 4 * 3
    # Greedy: both choices of a prompt agree, and match that prompt alone.
    assert batch.choices[0].text == batch.choices[1].text
    two = client.completions.create(**greedy(model, prompt="two", max_tokens=3))
    assert batch.choices[2].text == two.choices[0].text


def test_ends_at_a_stop_string_which_is_not_in_the_text(client, model):
    params = greedy(model, prompt="Stop strings", max_tokens=24, extra_body={"ignore_eos": True})
    text = client.completions.create(**params).choices[0].text
    # A stop string from the middle of what greedy decoding produced.
    match = re.search(r"[A-Za-z]{2}", text[4:])
    stop = match.group(0) if match else text[4:6]
    assert stop, f"greedy text too short for a stop string: {text!r}"
    expected = text[:text.index(stop)]
    stopped = client.completions.create(**params, stop=[stop])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == expected
    assert stopped.choices[0].stop_reason == stop
    streamed = list(client.completions.create(**params, stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == expected
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_samples_n_choices_reproducibly_with_a_seed(client, model):
    params = {"model": model, "prompt": "Random", "max_tokens": 6, "n": 3, "temperature": 1.0, "seed": 1234}
    a = client.completions.create(**params)
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert all(c.finish_reason in ("length", "stop") for c in a.choices)
    b = client.completions.create(**params)
    assert [c.text for c in b.choices] == [c.text for c in a.choices]
    streamed = list(client.completions.create(**params, stream=True))
    for index in (0, 1, 2):
        mine = [c for c in streamed if c.choices[0].index == index]
        assert "".join(c.choices[0].text for c in mine) == a.choices[index].text
        assert mine[-1].choices[0].finish_reason


def test_different_seeds_sample_differently(client, model):
    # 16 tokens at temperature 1 over a 964-token vocabulary with logits of std ~3: two
    # seeds (or two choices of one request) agreeing on all of them would be a seeding bug.
    params = {"model": model, "prompt": "Random", "max_tokens": 16, "temperature": 1.0,
              "extra_body": {"ignore_eos": True}}
    texts = {seed: client.completions.create(**params, seed=seed).choices[0].text for seed in (1, 2, 3)}
    assert len(set(texts.values())) == 3, texts
    assert client.completions.create(**params, seed=2).choices[0].text == texts[2]
    choices = client.completions.create(**params, seed=7, n=3).choices
    assert len({c.text for c in choices}) == 3, [c.text for c in choices]


def test_streamed_n_with_usage_counts_every_choice(client, model):
    chunks = list(client.completions.create(**greedy(model, prompt="Count", n=3, max_tokens=4, stream=True,
                                                     stream_options={"include_usage": True},
                                                     extra_body={"ignore_eos": True})))
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 3 * 4
    finished = [c.choices[0].index for c in chunks[:-1] if c.choices[0].finish_reason == "length"]
    assert sorted(finished) == [0, 1, 2]


def test_legacy_logprobs_the_greedy_token_is_the_top_one(client, model):
    r = client.completions.create(**greedy(model, prompt="Logprobs", max_tokens=5, logprobs=2,
                                           extra_body={"ignore_eos": True}))
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 5
    assert len(lp.token_logprobs) == 5
    assert "".join(lp.tokens) == r.choices[0].text
    for i in range(5):
        assert lp.token_logprobs[i] <= 0
        top = list(lp.top_logprobs[i].values())
        assert 1 <= len(top) <= 2
        assert abs(max(top) - lp.token_logprobs[i]) < 1e-5
        if i > 0:
            assert lp.text_offset[i] >= lp.text_offset[i - 1]


def test_echo_prompt_tokens_have_logprobs_but_the_first(client, model):
    r = client.completions.create(**greedy(model, prompt="Echo me", max_tokens=2, echo=True, logprobs=0))
    assert r.choices[0].text.startswith("Echo me")
    lp = r.choices[0].logprobs
    prompt_tokens = r.usage.prompt_tokens
    assert len(lp.tokens) == prompt_tokens + 2
    assert lp.token_logprobs[0] is None  # OpenAI: the first token has no context
    assert all(isinstance(x, float) and x <= 0 for x in lp.token_logprobs[1:])


def test_a_prompt_and_output_that_exactly_fill_the_context(client, model):
    r = client.completions.create(**greedy(model, prompt=[10] * (MAX_MODEL_LEN - 1), max_tokens=1,
                                           extra_body={"ignore_eos": True}))
    assert r.usage.prompt_tokens == MAX_MODEL_LEN - 1
    assert r.usage.completion_tokens == 1
    # Unset max_tokens: 16 for completions (OpenAI's default), fitted into what the context leaves.
    r = client.completions.create(**greedy(model, prompt="x", extra_body={"ignore_eos": True}))
    assert r.usage.completion_tokens == 16
    r = client.completions.create(**greedy(model, prompt=[10] * (MAX_MODEL_LEN - 5), extra_body={"ignore_eos": True}))
    assert r.usage.completion_tokens == 5
    assert r.choices[0].finish_reason == "length"
