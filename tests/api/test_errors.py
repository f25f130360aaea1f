"""Every error class through the official openai client: each surfaces as the client's
typed exception with the status, type, code and param docs/server.md gives it."""

import openai
import pytest

from conftest import MAX_MODEL_LEN, MAX_REQUEST_BODY

USER = [{"role": "user", "content": "x"}]


def expect(error_class, status, call, *args, **kwargs):
    """Runs call, which must raise exactly error_class with HTTP status `status`."""
    with pytest.raises(openai.APIStatusError) as info:
        call(*args, **kwargs)
    error = info.value
    assert type(error) is error_class, f"expected {error_class.__name__}, got {type(error).__name__}: {error}"
    assert error.status_code == status, error.message
    assert error.response.status_code == status
    assert error.message
    return error


def bad_request(call, param, **kwargs):
    error = expect(openai.BadRequestError, 400, call, **kwargs)
    assert error.type == "invalid_request_error"
    assert error.param == param, error.message
    return error


# ---- 400: wrong types and values ------------------------------------------------------

def test_400_for_wrong_types_and_values_naming_the_field(client, model):
    create = client.completions.create
    error = bad_request(create, "temperature", model=model, prompt="x", temperature=5)
    assert error.code is None
    bad_request(create, "max_tokens", model=model, prompt="x", max_tokens="many")
    bad_request(create, "n", model=model, prompt="x", n=1000)
    bad_request(create, "logprobs", model=model, prompt="x", logprobs=50)
    bad_request(create, "top_p", model=model, prompt="x", top_p=1.5)
    bad_request(create, "stop[1]", model=model, prompt="x", stop=["a", 3])
    bad_request(create, "prompt", model=model, prompt=None)
    chat = client.chat.completions.create
    bad_request(chat, "messages", model=model, messages=[])
    bad_request(chat, "messages[0].role", model=model, messages=[{"role": "wizard", "content": "x"}])
    # top_logprobs without logprobs
    expect(openai.BadRequestError, 400, chat, model=model, messages=USER, top_logprobs=2)
    bad_request(chat, "top_logprobs", model=model, messages=USER, logprobs=True, top_logprobs=21)


def test_400_for_n_and_max_tokens_out_of_bounds(client, model):
    create = client.completions.create
    bad_request(create, "n", model=model, prompt="x", n=0)
    bad_request(create, "n", model=model, prompt="x", n=65)  # over scheduler.max_num_seqs
    create(model=model, prompt="x", n=64, max_tokens=1)      # the limit itself is fine
    bad_request(create, "max_tokens", model=model, prompt="x", max_tokens=0)
    bad_request(create, "max_tokens", model=model, prompt="x", max_tokens=-1)
    bad_request(client.chat.completions.create, "max_completion_tokens", model=model, messages=USER,
                max_completion_tokens=0)


def test_400_for_fields_the_server_does_not_implement(client, model):
    create = client.completions.create
    bad_request(create, "suffix", model=model, prompt="x", suffix="y")


def test_unknown_fields_are_ignored_as_openai_does(client, model):
    plain = client.completions.create(model=model, prompt="x", max_tokens=3, temperature=0)
    extra = client.completions.create(model=model, prompt="x", max_tokens=3, temperature=0,
                                      extra_body={"no_such_field": {"a": 1}, "another": [1, 2]})
    assert extra.choices[0].text == plain.choices[0].text


def test_400_for_a_prompt_longer_than_the_context_or_outputs_that_do_not_fit(client, model):
    error = bad_request(client.completions.create, "prompt", model=model, prompt=[10] * 600)
    assert f"maximum context length is {MAX_MODEL_LEN} tokens" in error.message
    bad_request(client.completions.create, "max_tokens", model=model, prompt="x", max_tokens=600)
    # One token over: a prompt that fills the context, or one more than it leaves.
    bad_request(client.completions.create, "prompt", model=model, prompt=[10] * MAX_MODEL_LEN)
    error = bad_request(client.completions.create, "max_tokens", model=model, prompt=[10] * (MAX_MODEL_LEN - 1),
                        max_tokens=2)
    assert f"you requested {MAX_MODEL_LEN + 1} tokens" in error.message
    error = bad_request(client.completions.create, "prompt", model=model, prompt=[10, 964])
    assert "'prompt[1]' is 964, not a token id of this model (0 to 963)" in error.message
    long_chat = [{"role": "user", "content": "word " * 600}]
    error = bad_request(client.chat.completions.create, "messages", model=model, messages=long_chat)
    assert f"maximum context length is {MAX_MODEL_LEN} tokens" in error.message


def test_401_without_the_right_key(server, model):
    with server.client(api_key="wrong") as wrong:
        error = expect(openai.AuthenticationError, 401, wrong.models.list)
        assert error.code == "invalid_api_key"
        assert error.response.headers["www-authenticate"].startswith("Bearer")
        error = expect(openai.AuthenticationError, 401, wrong.completions.create, model=model, prompt="x")
        assert error.code == "invalid_api_key"
    # The client refuses to send without a key; the server refuses a request without one.
    with server.http() as http:
        missing = http.post("/v1/completions", json={"model": model, "prompt": "x"})
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "invalid_api_key"


def test_404_for_an_unknown_model_or_route_405_for_a_wrong_method(client, model):
    error = expect(openai.NotFoundError, 404, client.completions.create, model="gpt-4", prompt="x")
    assert error.code == "model_not_found"
    error = expect(openai.NotFoundError, 404, client.chat.completions.create, model="gpt-4", messages=USER)
    assert error.code == "model_not_found"
    expect(openai.NotFoundError, 404, client.models.retrieve, "gpt-4")
    error = expect(openai.NotFoundError, 404, client.embeddings.create, model=model, input="x")
    assert error.code == "not_found"
    error = expect(openai.APIStatusError, 405, client.get, "/completions", cast_to=object)
    assert error.response.headers["allow"] == "POST"
    assert error.code == "method_not_allowed"


def test_413_for_a_body_over_the_limit(client, model):
    error = expect(openai.APIStatusError, 413, client.completions.create, model=model,
                   prompt="x" * (MAX_REQUEST_BODY + 36 * 1024))
    assert error.code == "request_too_large"
    # The connection closed after the 413; the client's next request gets a new one.
    assert len(client.models.list().data) == 1


def test_431_for_a_header_over_16_kib(client, model):
    error = expect(openai.APIStatusError, 431, client.completions.create, model=model, prompt="x", max_tokens=1,
                   extra_headers={"X-Padding": "a" * (17 * 1024)})
    assert error.type == "invalid_request_error"
    # The connection closed after the 431; the client's next request gets a new one.
    assert len(client.models.list().data) == 1


def test_a_bad_streaming_request_fails_before_any_chunk(client, model):
    bad_request(client.completions.create, "temperature", model=model, prompt="x", temperature=-1, stream=True)
    bad_request(client.chat.completions.create, "messages", model=model, messages=[], stream=True)
    error = expect(openai.NotFoundError, 404, client.chat.completions.create, model="gpt-4", messages=USER,
                   stream=True)
    assert error.code == "model_not_found"


def test_400_for_a_body_that_is_not_json_and_the_connection_is_fine_after(client):
    headers = {"Content-Type": "application/json"}
    for body in (b'{"prompt": ', b"not json", b"[1, 2]", b'"a string"'):
        error = expect(openai.BadRequestError, 400, client.post, "/completions", cast_to=object, content=body,
                       options={"headers": headers})
        assert error.type == "invalid_request_error"
    assert len(client.models.list().data) == 1


# ---- 503 --------------------------------------------------------------------------------

def test_503_with_retry_after_over_max_concurrent_requests(start_server):
    busy = start_server(["server.max_concurrent_requests=1"])
    try:
        with busy.client() as c:
            model = c.models.list().data[0].id
            stream = c.completions.create(model=model, prompt="x", max_tokens=400, stream=True,
                                          extra_body={"ignore_eos": True})
            next(iter(stream))  # the first request is running
            error = expect(openai.InternalServerError, 503, c.completions.create, model=model, prompt="y",
                           max_tokens=2)
            assert error.code == "overloaded"
            assert error.response.headers["retry-after"] == "1"
            stream.close()
    finally:
        assert busy.stop() == 0, busy.log()

