"""SIGTERM with a stream in flight, through the official openai client: within the grace
period the stream finishes whole; past it, the stream ends with a `request_aborted` error
event, which the client raises as APIError. Either way the host exits 0."""

import signal

import openai

MESSAGES = [{"role": "user", "content": "Tell a long story."}]


def test_a_stream_in_flight_finishes_after_sigterm(start_server):
    host = start_server()
    try:
        with host.client() as client:
            model = client.models.list().data[0].id
            stream = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=200, stream=True,
                                                    stream_options={"include_usage": True},
                                                    extra_body={"ignore_eos": True})
            chunks = iter(stream)
            first = next(chunks)
            assert first.choices[0].delta.role == "assistant"
            host.process.send_signal(signal.SIGTERM)
            rest = list(chunks)
            assert rest[-1].usage.completion_tokens == 200
            assert rest[-2].choices[0].finish_reason == "length"
    finally:
        assert host.stop() == 0, host.log()


def test_a_stream_past_the_grace_period_ends_with_request_aborted(start_server):
    host = start_server(["server.shutdown_grace_period_s=1"])
    try:
        with host.client() as client:
            model = client.models.list().data[0].id
            # Nearly the whole 16k context: far longer than the 1 s grace period.
            stream = client.completions.create(model=model, prompt="Once", max_tokens=16000, stream=True,
                                               extra_body={"ignore_eos": True})
            chunks = iter(stream)
            next(chunks)
            host.process.send_signal(signal.SIGTERM)
            received = 1
            try:
                for chunk in chunks:
                    received += 1
                    assert chunk.choices[0].finish_reason is None, "the stream finished within the grace period"
            except openai.APIError as error:
                assert not isinstance(error, openai.APIConnectionError), error
                assert error.code == "request_aborted", error.body
            else:
                raise AssertionError(f"the stream ended after {received} chunks without an error event")
    finally:
        assert host.stop() == 0, host.log()
