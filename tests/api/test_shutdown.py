"""SIGTERM with a stream in flight, through the official openai client: within the grace
period the stream finishes whole; past it, the stream ends with a `request_aborted` error
event, which the client raises as APIError. Either way the host exits 0."""

import asyncio
import json
import signal
import time

import httpx2
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


# ---- SIGTERM under load ---------------------------------------------------------------------

LOAD_STREAMS = 64
LOAD_GRACE_S = 2
# The host may take the grace period, then up to 5 s for aborted requests to end (serve.cpp),
# then the engine's and the server's shutdown.
LOAD_EXIT_BOUND_S = LOAD_GRACE_S + 5 + 3


async def read_sse(http, index, opened):
    """One stream of raw SSE: returns its `data:` payloads as text. Half the streams are
    short (they finish within the grace period), half nearly fill the 16k context (they
    are aborted when it ends)."""
    short = index % 2 == 0
    body = {"max_tokens": 8 if short else 16000, "stream": True, "ignore_eos": True, "n": 1 + index % 3,
            "temperature": 0.8, "seed": index}
    if index % 4 < 2:
        path, body["prompt"] = "/v1/completions", f"Story {index}:"
    else:
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": f"Story {index}."}]
    events = []
    async with http.stream("POST", path, json=body) as response:
        assert response.status_code == 200, f"stream {index}: {response.status_code}"
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: "):])
                if len(events) == 1:
                    opened.release()
    return short, events


def test_sigterm_with_many_streams_open_ends_every_stream_and_exits_0(start_server):
    """64 streams open (n = 1..3, completions and chat) when SIGTERM arrives: short ones
    finish, the long ones end with a request_aborted error event, every one ends with
    [DONE]; new connections are refused meanwhile, and the host exits 0 within the grace
    period plus the documented abort wait."""
    # Room for every stream's sequences at once (64 streams of n = 1..3 are 128 sequences):
    # with the config's 64, a short stream could wait behind long ones that never finish
    # before the signal, and never see its first event.
    host = start_server([f"server.shutdown_grace_period_s={LOAD_GRACE_S}", "scheduler.max_num_seqs=160"])
    code = None
    try:
        async def scenario():
            opened = asyncio.Semaphore(0)
            limits = httpx2.Limits(max_connections=LOAD_STREAMS)
            async with httpx2.AsyncClient(base_url=host.url, timeout=60, trust_env=False, limits=limits) as http:
                streams = [asyncio.create_task(read_sse(http, i, opened)) for i in range(LOAD_STREAMS)]
                for _ in range(LOAD_STREAMS):  # every stream has its first event
                    await asyncio.wait_for(opened.acquire(), 60)
                running = host.metric("pagedllm:num_requests_running") + host.metric("pagedllm:num_requests_waiting")
                signalled = time.monotonic()
                host.process.send_signal(signal.SIGTERM)
                # A new connection is refused (or not served) once the host has seen the signal,
                # while the streams are still open.
                late = 200
                while late == 200 and time.monotonic() - signalled < LOAD_GRACE_S:
                    await asyncio.sleep(0.05)
                    try:
                        async with httpx2.AsyncClient(base_url=host.url, timeout=5, trust_env=False) as fresh:
                            late = (await fresh.get("/health")).status_code
                    except httpx2.TransportError:
                        late = None
                assert late in (None, 503), f"/health answered {late} during the shutdown"
                results = await asyncio.wait_for(asyncio.gather(*streams), LOAD_EXIT_BOUND_S + 30)
                streams_ended = time.monotonic() - signalled
                return running, results, streams_ended, signalled

        running, results, streams_ended, signalled = asyncio.run(scenario())
        assert running > 0
        code = host.process.wait(timeout=LOAD_EXIT_BOUND_S + 30)
        exited = time.monotonic() - signalled
        assert exited <= LOAD_EXIT_BOUND_S, f"exit {exited:.1f} s after SIGTERM"
        assert streams_ended <= LOAD_EXIT_BOUND_S
        finished = aborted = 0
        for index, (short, events) in enumerate(results):
            assert events[-1] == "[DONE]", f"stream {index} ended with {events[-1]!r}"
            payloads = [json.loads(e) for e in events[:-1]]
            assert all("error" not in p for p in payloads[:-1]), f"stream {index}: an error event before the last"
            if "error" in payloads[-1]:
                assert payloads[-1]["error"]["code"] == "request_aborted", payloads[-1]
                aborted += 1
            else:
                reasons = [c["finish_reason"] for p in payloads for c in p["choices"] if c["finish_reason"]]
                assert len(reasons) == 1 + index % 3, f"stream {index}: finish reasons {reasons}"
                finished += 1
            if not short:
                assert "error" in payloads[-1], f"long stream {index} finished within the grace period"
        # More sequences than max_num_seqs: some short streams wait behind the long ones
        # (FCFS) and are aborted too; the rest finish.
        assert finished >= 1 and aborted >= LOAD_STREAMS // 2, (finished, aborted)
        log = host.log()
        assert "aborting" in log, log
    finally:
        if code is None:
            code = host.stop()
        else:
            host.stop()
        assert code == 0, host.log()
