"""Beam search (vLLM's use_beam_search, best_of as the width, length_penalty, early_stopping) through
the official openai client, against transformers' generate(num_beams=...) on the embedded
models/pagedllm-tiny, computed here (beam_oracle.py): the same hypotheses in the same order, each
token's logprob and each hypothesis' score within the engine's tolerance; its bounds as 400s naming
the field; every KV block back in the pool afterwards.

Each case's search has no decision within twice the engine's tolerance of a tie: per token
1e-4 + 1e-5 |logprob|, summed over a beam's tokens (at most 2.2e-3 here, 20 tokens), over
length ** length_penalty for a score (at most 6.9e-3, length_penalty -0.5 over 16 tokens). The
smallest gaps are in CASES (`python tests/api/beam_oracle.py` measures them again), each over
twice its case's tolerance, so engine and oracle cannot legitimately disagree on any beam.
"""

import time

import pytest
import transformers

import beam_oracle
from test_errors import bad_request

# (prompt or chat messages, width, n, max_tokens, length_penalty, early_stopping): the smallest gap
# of each search between two values whose order decides something, from beam_oracle.py.
CASES = [
    ("class Stack:\n    def __init__(self):\n", 4, 2, 12, 1.0, False),     # gap 2.1e-2
    ("class Stack:\n    def __init__(self):\n", 3, 3, 10, 0.5, True),      # 1.2e-2; a hypothesis ends on EOS
    ("x = [1, 2, 3]\nprint(", 4, 1, 12, 2.0, "never"),                   # 3.3e-3
    ("for i in range(10):\n", 2, 2, 16, -0.5, False),                   # 6.9e-1
    # 6.2e-3. Its best hypothesis of one token (EOS) ranks first at length_penalty 0.8, not at 0.9.
    ("if __name__ == '__main__':\n    main()\n", 4, 3, 20, 0.9, False),
]
CHAT_CASE = ([{"role": "user", "content": "def add(a, b):"}], 3, 2, 8, 1.0, False)  # 3.1e-2


# tests/fidelity's bound on the engine's logprobs against transformers (both float32, summed in
# different orders, each within a few 1e-6 of float64): 1e-4 + 1e-5 |ref| per token. A score is the
# sum of its tokens' over length ** length_penalty; the cases' smallest gaps are over twice that.
def close(engine, hf):
    return abs(engine - hf) <= 1e-4 + 1e-5 * abs(hf)


def score_tolerance(logprobs, length_penalty):
    return sum(1e-4 + 1e-5 * abs(x) for x in logprobs) / len(logprobs) ** length_penalty


@pytest.fixture(scope="module")
def beam_server(start_server):
    with pytest.MonkeyPatch.context() as patch:
        # tests/fidelity's exact path: the checkpoint is bf16, and an AVX512-BF16 prefill rounds activations.
        patch.setenv("PAGEDLLM_CPU_ISA", "avx512vnni")
        host = start_server([f"model.path={beam_oracle.MODEL_DIR}"])
    yield host
    assert host.stop() == 0, host.log()


@pytest.fixture(scope="module")
def beam_client(beam_server):
    with beam_server.client() as c:
        yield c


@pytest.fixture(scope="module")
def hf_tokenizer():
    return transformers.AutoTokenizer.from_pretrained(beam_oracle.MODEL_DIR)


def prompt_ids(server, body):
    with server.http() as http:
        response = http.post("/tokenize", json=body)
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


def blocks_in_use_settles_to_zero(server):
    deadline = time.monotonic() + 10
    while server.metric("pagedllm:kv_cache_blocks_in_use") != 0:
        assert time.monotonic() < deadline, "KV blocks still in use after the requests ended"
        time.sleep(0.05)


def check_choices(choices, texts, logprobs, ids, case, hf_tokenizer, first_index=0):
    """choices against transformers' hypotheses: texts and per-token logprobs of ours, in order."""
    _, width, n, max_tokens, length_penalty, early_stopping = case
    expected = beam_oracle.hf_beam_search(ids, width, n, max_tokens, length_penalty, early_stopping)
    assert len(choices) == n
    for rank, (choice, text, ours, (tokens, score)) in enumerate(zip(choices, texts, logprobs, expected)):
        where = f"hypothesis {rank}: {tokens}"
        assert choice.index == first_index + rank
        assert text == hf_tokenizer.decode(tokens, skip_special_tokens=True), where
        assert len(ours) == len(tokens), where
        hf = beam_oracle.token_logprobs(ids, tokens)
        assert all(close(a, b) for a, b in zip(ours, hf)), (where, ours, hf)
        got = sum(ours) / len(ours) ** length_penalty
        assert abs(got - score) <= score_tolerance(hf, length_penalty), (where, got, score)
        assert choice.finish_reason == ("stop" if tokens[-1] in beam_oracle.EOS else "length"), where
    return sum(len(x) for x in logprobs)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"w{c[1]}-n{c[2]}-lp{c[4]}-es{c[5]}")
def test_completions_beam_search_equals_transformers(beam_server, beam_client, hf_tokenizer, case):
    prompt, width, n, max_tokens, length_penalty, early_stopping = case
    ids = prompt_ids(beam_server, {"prompt": prompt})
    served = beam_client.models.list().data[0].id
    # No temperature given: the model's generation_config.json (temperature 0.6, top_p 0.95) is not
    # applied to beam search, which is greedy-style.
    beam = {"use_beam_search": True, "length_penalty": length_penalty, "early_stopping": early_stopping}
    r = beam_client.completions.create(model=served, prompt=prompt, n=n, best_of=width, max_tokens=max_tokens,
                                       logprobs=0, extra_body=beam)
    generated = check_choices(r.choices, [c.text for c in r.choices], [c.logprobs.token_logprobs for c in r.choices],
                              ids, case, hf_tokenizer)
    assert r.usage.completion_tokens == generated  # the returned hypotheses' tokens, as vLLM counts them
    # Without logprobs asked: the same hypotheses, no logprobs shown.
    quiet = beam_client.completions.create(model=served, prompt=prompt, n=n, best_of=width, max_tokens=max_tokens,
                                           extra_body=beam)
    assert [c.text for c in quiet.choices] == [c.text for c in r.choices]
    assert all(c.logprobs is None for c in quiet.choices)
    blocks_in_use_settles_to_zero(beam_server)


def test_chat_beam_search_equals_transformers(beam_server, beam_client, hf_tokenizer):
    messages, width, n, max_tokens, length_penalty, early_stopping = CHAT_CASE
    ids = prompt_ids(beam_server, {"messages": messages})
    served = beam_client.models.list().data[0].id
    r = beam_client.chat.completions.create(model=served, messages=messages, n=n, max_tokens=max_tokens, logprobs=True,
                                            top_logprobs=2,
                                            extra_body={"use_beam_search": True, "best_of": width,
                                                        "length_penalty": length_penalty,
                                                        "early_stopping": early_stopping})
    logprobs = [[t.logprob for t in c.logprobs.content] for c in r.choices]
    check_choices(r.choices, [c.message.content for c in r.choices], logprobs, ids, CHAT_CASE, hf_tokenizer)
    for choice in r.choices:
        for token in choice.logprobs.content:
            top = [t.logprob for t in token.top_logprobs]
            assert len(top) == 2 and top[0] >= top[1] and top[0] >= token.logprob
    blocks_in_use_settles_to_zero(beam_server)


def test_beam_search_of_a_batch_of_prompts_searches_each_apart(beam_server, beam_client, hf_tokenizer):
    # CASES[0], and CASES[3]'s prompt with its parameters: smallest gap 1.9e-2.
    prompts = [CASES[0][0], CASES[3][0]]
    served = beam_client.models.list().data[0].id
    r = beam_client.completions.create(model=served, prompt=prompts, n=2, best_of=4, max_tokens=12, logprobs=0,
                                       extra_body={"use_beam_search": True})
    assert len(r.choices) == 4
    for p, prompt in enumerate(prompts):
        ids = prompt_ids(beam_server, {"prompt": prompt})
        choices = r.choices[2 * p:2 * p + 2]
        check_choices(choices, [c.text for c in choices], [c.logprobs.token_logprobs for c in choices], ids,
                      (prompt, 4, 2, 12, 1.0, False), hf_tokenizer, first_index=2 * p)


def test_400_for_beam_search_with_sampling_parameters_or_bad_values(beam_client):
    served = beam_client.models.list().data[0].id
    create = beam_client.completions.create
    beam = {"use_beam_search": True}
    common = dict(model=served, prompt="x", max_tokens=2)
    error = bad_request(create, "temperature", **common, best_of=2, temperature=0.7, extra_body=beam)
    assert "temperature must be 0 when using beam search" in error.message
    bad_request(create, "top_p", **common, best_of=2, top_p=0.9, extra_body=beam)
    bad_request(create, "top_k", **common, best_of=2, extra_body={**beam, "top_k": 5})
    bad_request(create, "min_p", **common, best_of=2, extra_body={**beam, "min_p": 0.1})
    bad_request(create, "presence_penalty", **common, best_of=2, presence_penalty=0.5, extra_body=beam)
    bad_request(create, "repetition_penalty", **common, best_of=2, extra_body={**beam, "repetition_penalty": 1.2})
    bad_request(create, "logit_bias", **common, best_of=2, logit_bias={"5": 3}, extra_body=beam)
    bad_request(create, "min_tokens", **common, best_of=2, extra_body={**beam, "min_tokens": 1})
    bad_request(create, "stop", **common, best_of=2, stop=["\n"], extra_body=beam)
    bad_request(create, "response_format", **common, best_of=2,
                extra_body={**beam, "response_format": {"type": "json_object"}})
    error = bad_request(create, "best_of", **common, extra_body=beam)  # width 1 (best_of defaults to n)
    assert "between 2 and" in error.message
    bad_request(create, "best_of", **common, n=3, best_of=2, extra_body=beam)
    bad_request(create, "best_of", **common, best_of=65, extra_body=beam)  # over scheduler.max_num_seqs
    error = bad_request(create, "stream", **common, best_of=2, stream=True, extra_body=beam)
    assert "not supported with beam search" in error.message
    bad_request(create, "early_stopping", **common, best_of=2, extra_body={**beam, "early_stopping": "sometimes"})
    bad_request(create, "length_penalty", **common, best_of=2, extra_body={**beam, "length_penalty": "long"})
    # Beam search's own fields without it: refused unless at their defaults, as vLLM does.
    bad_request(create, "length_penalty", **common, extra_body={"length_penalty": 2.0})
    bad_request(create, "early_stopping", **common, extra_body={"early_stopping": True})
    create(**common, temperature=0, extra_body={"length_penalty": 1.0, "early_stopping": False})
    # Chat takes best_of only as the beam width.
    chat = beam_client.chat.completions.create
    messages = [{"role": "user", "content": "x"}]
    bad_request(chat, "best_of", model=served, messages=messages, extra_body={"best_of": 2})
    bad_request(chat, "temperature", model=served, messages=messages, temperature=1.0,
                extra_body={**beam, "best_of": 2})
