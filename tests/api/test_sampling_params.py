"""logit_bias, min_tokens and best_of through the official openai client: their effect on
what is sampled (against the model's own greedy output, the tokenizer and the logprobs the
server reports for every candidate, never against this server's sampler), their bounds as
400s naming the field, and every KV block back in the pool afterwards."""

import time

import pytest

from test_errors import bad_request

USER = [{"role": "user", "content": "x"}]


def token_id(server, text):
    with server.http() as http:
        response = http.post("/tokenize", json={"prompt": text, "add_special_tokens": False})
    assert response.status_code == 200, response.text
    return response.json()["tokens"][-1]


def detokenize(server, ids):
    with server.http() as http:
        response = http.post("/detokenize", json={"tokens": ids})
    assert response.status_code == 200, response.text
    return response.json()["prompt"]


def test_logit_bias_100_forces_a_token_and_logprobs_stay_raw(server, client, model):
    forced = token_id(server, " banana")
    expected = detokenize(server, [forced] * 3)
    for temperature, seed in ((0, None), (1.0, 7)):
        r = client.completions.create(model=model, prompt="Fruit:", max_tokens=3, temperature=temperature,
                                      seed=seed, logit_bias={str(forced): 100}, logprobs=2,
                                      extra_body={"ignore_eos": True})
        assert r.choices[0].text == expected
        lp = r.choices[0].logprobs
        # The reported logprob is the model's own (before the bias): a random tiny model
        # gives no token of its 964 anything near certainty.
        assert all(x < -1.0 for x in lp.token_logprobs), lp.token_logprobs
    chat = client.chat.completions.create(model=model, messages=USER, max_completion_tokens=3, temperature=0,
                                          logit_bias={str(forced): 100}, extra_body={"ignore_eos": True})
    assert chat.choices[0].message.content == expected


def test_logit_bias_minus_100_bans_the_greedy_token(server, client, model):
    plain = client.completions.create(model=model, prompt="Once upon", max_tokens=1, temperature=0, logprobs=3)
    top = plain.choices[0].logprobs.top_logprobs[0]
    ranked = sorted(top.items(), key=lambda item: -item[1])
    first = token_id(server, ranked[0][0])
    assert detokenize(server, [first]) == ranked[0][0]
    banned = client.completions.create(model=model, prompt="Once upon", max_tokens=1, temperature=0, logprobs=3,
                                       logit_bias={str(first): -100})
    # The runner-up of the unbiased distribution, with its unchanged raw logprob.
    assert banned.choices[0].text == ranked[1][0]
    assert banned.choices[0].logprobs.token_logprobs[0] == pytest.approx(ranked[1][1], abs=1e-5)


def test_min_tokens_holds_back_a_stop_token_and_stop_strings(server, client, model):
    forced = token_id(server, " banana")
    body = dict(model=model, prompt="Fruit:", max_tokens=6, temperature=0, logit_bias={str(forced): 100})
    stopped_at_once = client.completions.create(**body, extra_body={"stop_token_ids": [forced]})
    assert stopped_at_once.usage.completion_tokens == 1
    assert stopped_at_once.choices[0].finish_reason == "stop"
    # Not before 3 tokens: the forced token is not sampled until then, then it stops.
    r = client.completions.create(**body, extra_body={"stop_token_ids": [forced], "min_tokens": 3})
    assert r.usage.completion_tokens == 4
    assert r.choices[0].finish_reason == "stop"
    # A stop string in the first min_tokens tokens' text does not stop the sequence.
    greedy = client.completions.create(model=model, prompt="Once upon", max_tokens=4, temperature=0,
                                       extra_body={"ignore_eos": True})
    stop = greedy.choices[0].text[:2]
    assert client.completions.create(model=model, prompt="Once upon", max_tokens=4, temperature=0, stop=[stop],
                                     extra_body={"ignore_eos": True}).choices[0].finish_reason == "stop"
    held = client.completions.create(model=model, prompt="Once upon", max_tokens=4, temperature=0, stop=[stop],
                                     extra_body={"ignore_eos": True, "min_tokens": 4})
    assert held.choices[0].text == greedy.choices[0].text
    assert held.choices[0].finish_reason == "length"


def test_400_for_logit_bias_and_min_tokens_out_of_bounds(client, model):
    create = client.completions.create
    error = bad_request(create, "logit_bias", model=model, prompt="x", logit_bias={"5": 100.5})
    assert "between -100 and 100" in error.message
    bad_request(create, "logit_bias", model=model, prompt="x", logit_bias={"5": -101})
    bad_request(create, "logit_bias", model=model, prompt="x", logit_bias={"five": 1})
    bad_request(create, "logit_bias", model=model, prompt="x", logit_bias={"100000": 1})
    bad_request(create, "logit_bias", model=model, prompt="x", logit_bias={str(i): 1 for i in range(301)})
    create(model=model, prompt="x", max_tokens=1, logit_bias={str(i): 1 for i in range(300)})  # the limit is fine
    bad_request(client.chat.completions.create, "logit_bias", model=model, messages=USER, logit_bias={"5": 200})
    bad_request(create, "min_tokens", model=model, prompt="x", extra_body={"min_tokens": -1})
    error = bad_request(create, "min_tokens", model=model, prompt="x", max_tokens=2, extra_body={"min_tokens": 3})
    assert "max_tokens" in error.message


# ---- best_of ------------------------------------------------------------------------

def cumulative(choice):
    return sum(choice.logprobs.token_logprobs)


def blocks_in_use_settles_to_zero(server):
    # The gauge is updated at the end of the engine step that delivered the last output.
    deadline = time.monotonic() + 10
    while server.metric("pagedllm:kv_cache_blocks_in_use") != 0:
        assert time.monotonic() < deadline, "KV blocks still in use after the requests ended"
        time.sleep(0.05)


def test_best_of_returns_the_n_best_of_the_sequences_it_generated(server, client, model):
    body = dict(model=model, prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=1234, logprobs=0,
                extra_body={"ignore_eos": True})
    # The same seed samples the same sequences (each sequence's stream derives from the
    # request seed and its index), so n = best_of shows every candidate.
    every = client.completions.create(n=5, best_of=5, **body)
    assert len(every.choices) == 5
    ranked = sorted(every.choices, key=lambda c: (-cumulative(c), c.index))
    assert len({round(cumulative(c), 4) for c in every.choices}) == 5, "need distinct scores to rank"
    best = client.completions.create(n=2, best_of=5, **body)
    assert [c.index for c in best.choices] == [0, 1]
    assert [c.text for c in best.choices] == [c.text for c in ranked[:2]]
    for got, expected in zip(best.choices, ranked[:2]):
        assert cumulative(got) == pytest.approx(cumulative(expected), abs=1e-4)
        assert got.logprobs.tokens == expected.logprobs.tokens
    # Usage counts every generated token, returned or not.
    assert best.usage.completion_tokens == 5 * 6 == every.usage.completion_tokens
    # Without logprobs asked the ranking is the same, and none are shown.
    quiet = client.completions.create(n=2, best_of=5, **{**body, "logprobs": None})
    assert [c.text for c in quiet.choices] == [c.text for c in ranked[:2]]
    assert all(c.logprobs is None for c in quiet.choices)
    blocks_in_use_settles_to_zero(server)


def test_best_of_with_a_batch_of_prompts_ranks_each_prompt_apart(server, client, model):
    body = dict(model=model, max_tokens=4, temperature=1.0, seed=99, logprobs=0, extra_body={"ignore_eos": True})
    prompts = ["Alpha", "Omega beta"]
    every = client.completions.create(prompt=prompts, n=3, best_of=3, **body)
    best = client.completions.create(prompt=prompts, n=1, best_of=3, **body)
    assert len(best.choices) == 2
    for p in range(2):
        candidates = every.choices[3 * p:3 * p + 3]
        top = max(candidates, key=lambda c: (cumulative(c), -c.index))
        assert best.choices[p].index == p
        assert best.choices[p].text == top.text
    assert best.usage.completion_tokens == 2 * 3 * 4
    blocks_in_use_settles_to_zero(server)


def test_400_for_best_of_out_of_bounds_and_with_stream(client, model):
    create = client.completions.create
    error = bad_request(create, "best_of", model=model, prompt="x", n=3, best_of=2)
    assert "greater than or equal to 'n'" in error.message
    bad_request(create, "best_of", model=model, prompt="x", best_of=0)
    bad_request(create, "best_of", model=model, prompt="x", best_of=65)  # over scheduler.max_num_seqs
    bad_request(create, "stream", model=model, prompt="x", best_of=2, stream=True)
    create(model=model, prompt="x", n=2, best_of=2, stream=True, max_tokens=1).close()  # best_of == n streams
    bad_request(client.chat.completions.create, "best_of", model=model, messages=USER, extra_body={"best_of": 2})


# ---- prompt logprobs and echo -------------------------------------------------------

def hf_prompt_logprobs(serve_config, ids):
    """log_softmax of transformers' LlamaForCausalLM (float32, eager, CPU) on the served
    checkpoint: entry i is prompt token i + 1's logprob and the row it came from."""
    import torch
    import transformers

    model = transformers.LlamaForCausalLM.from_pretrained(serve_config.parent / "tiny", dtype=torch.float32,
                                                          attn_implementation="eager")
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    rows = torch.log_softmax(logits, dim=-1)
    return [(float(rows[i, ids[i + 1]]), rows[i]) for i in range(len(ids) - 1)]


# tests/fidelity/engine_llama_fidelity_test.cpp's tolerance and its justification: both
# sides compute the same float32 model in different orders, each within a few 1e-6 of
# float64; a real bug (a wrong position, a skipped row) moves logprobs by 1e-2 or more.
def close(engine, hf):
    return abs(engine - hf) <= 1e-4 + 1e-5 * abs(hf)


def test_prompt_logprobs_and_echo_match_transformers(server, serve_config, client, model):
    prompt = "The quick brown fox jumps over the lazy dog because it was"
    with server.http() as http:
        ids = http.post("/tokenize", json={"prompt": prompt}).json()["tokens"]
    expected = hf_prompt_logprobs(serve_config, ids)
    r = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0, echo=True, logprobs=2,
                                  extra_body={"prompt_logprobs": 3})
    lp = r.choices[0].logprobs
    assert lp.token_logprobs[0] is None
    for i, (hf, row) in enumerate(expected):
        assert close(lp.token_logprobs[i + 1], hf), (i, lp.token_logprobs[i + 1], hf)
        alternatives = list(lp.top_logprobs[i + 1].values())
        assert 1 <= len(alternatives) <= 2  # keyed by text: two byte tokens may both show as U+FFFD
        top2 = [float(x) for x in row.topk(2).values]
        assert all(any(close(value, hf_top) for hf_top in top2) for value in alternatives)
    # vLLM's prompt_logprobs: null, then the prompt token and the top 3 by id.
    entries = r.choices[0].model_extra["prompt_logprobs"]
    assert entries[0] is None and len(entries) == len(ids)
    for i, (hf, row) in enumerate(expected):
        entry = entries[i + 1]
        assert close(entry[str(ids[i + 1])]["logprob"], hf)
        top3 = row.topk(3).indices.tolist()
        assert set(top3) <= {int(k) for k in entry}
        assert 3 <= len(entry) <= 4


def test_prompt_logprobs_with_chunked_prefill_and_a_repeated_prompt(start_server, serve_config):
    # A 16-token budget prefills the prompt in chunks; the repeat would hit the prefix cache.
    host = start_server(["scheduler.max_num_batched_tokens=16", "scheduler.max_model_len=512"])
    try:
        with host.client() as c:
            served = c.models.list().data[0].id
            prompt = " ".join(f"word{i}" for i in range(30))
            with host.http() as http:
                ids = http.post("/tokenize", json={"prompt": prompt}).json()["tokens"]
            assert len(ids) > 40
            expected = hf_prompt_logprobs(serve_config, ids)
            for _ in range(2):
                r = c.completions.create(model=served, prompt=prompt, max_tokens=2, temperature=0,
                                         extra_body={"prompt_logprobs": 0})
                entries = r.choices[0].model_extra["prompt_logprobs"]
                assert len(entries) == len(ids)
                for i, (hf, _) in enumerate(expected):
                    assert close(entries[i + 1][str(ids[i + 1])]["logprob"], hf), i
    finally:
        assert host.stop() == 0, host.log()
