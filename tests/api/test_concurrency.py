"""Many concurrent streams through AsyncOpenAI, a quarter of the clients leaving
mid-stream: every other stream gets a complete, well-formed answer, each leaver's
request is aborted, and afterwards nothing runs and no KV block is in use. Then SIGTERM:
the server exits 0."""

import asyncio
import time

import openai
import pytest

STREAMS = 72
MAX_TOKENS = 24
# A leaver asks for nearly the whole 16k context (conftest makes the model's context
# 16384): the tiny model decodes hundreds of tokens before a busy client reads its third
# chunk, so a short leaver could finish before it leaves.
LEAVER_MAX_TOKENS = 16000
LEAVE_AFTER_CHUNKS = 3
STREAMS_TIMEOUT_S = 120
DRAIN_TIMEOUT_S = 10
ABORTED = 'finished_reason="abort"'


@pytest.fixture(scope="module")
def busy_server(start_server):
    host = start_server()
    yield host
    assert host.stop() == 0, host.log()


async def run_stream(client, model, i):
    leaves = i % 4 == 0
    params = {"model": model, "max_tokens": LEAVER_MAX_TOKENS if leaves else MAX_TOKENS, "temperature": 0.8,
              "seed": i, "stream": True, "stream_options": {"include_usage": True},
              "extra_body": {"ignore_eos": True}}
    if i % 2 == 0:
        stream = await client.chat.completions.create(
            **params, messages=[{"role": "user", "content": f"Tell story number {i}."}])
    else:
        stream = await client.completions.create(**params, prompt=f"Story number {i}:")
    chunks = []
    async for chunk in stream:
        chunks.append(chunk)
        if leaves and len(chunks) == LEAVE_AFTER_CHUNKS:
            await stream.close()  # the client leaves: its connection closes mid-stream
            return leaves, chunks
    return leaves, chunks


def check_complete(i, chunks):
    chat = i % 2 == 0
    usage = chunks[-1]
    assert usage.choices == [], f"stream {i}: the last chunk carries usage only"
    assert usage.usage.completion_tokens == MAX_TOKENS, f"stream {i}: completion tokens"
    body = chunks[:-1]
    assert len(body) >= 2, f"stream {i}: has content chunks"
    for c in body:
        assert c.id == usage.id, f"stream {i}: one id"
        assert c.object == ("chat.completion.chunk" if chat else "text_completion")
        assert len(c.choices) == 1
        assert c.choices[0].index == 0
        assert c.usage is None
    if chat:
        assert body[0].choices[0].delta.role == "assistant"
    assert body[-1].choices[0].finish_reason == "length", f"stream {i}: finishes by length"
    assert all(c.choices[0].finish_reason is None for c in body[:-1]), f"stream {i}: one finish"


async def wait_for_drain(server, aborts_before, left):
    """Polls /metrics until nothing runs, no KV block is owned and every leaver's request
    is aborted, for up to DRAIN_TIMEOUT_S; returns the last values."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        running = server.metric("pagedllm:num_requests_running")
        blocks = server.metric("pagedllm:kv_cache_blocks_in_use")
        aborts = server.metric("pagedllm:request_success_total", ABORTED) - aborts_before
        if (running == 0 and blocks == 0 and aborts == left) or time.monotonic() > deadline:
            return running, blocks, aborts
        await asyncio.sleep(0.05)


def test_concurrent_streams_a_quarter_of_the_clients_leaving_mid_stream(busy_server):
    server = busy_server
    aborts_before = server.metric("pagedllm:request_success_total", ABORTED)
    length_before = server.metric("pagedllm:request_success_total", 'finished_reason="length"')

    async def run():
        async with server.async_client() as client:
            model = (await client.models.list()).data[0].id
            results = await asyncio.wait_for(
                asyncio.gather(*(run_stream(client, model, i) for i in range(STREAMS))), STREAMS_TIMEOUT_S)
            left = sum(1 for leaves, _ in results if leaves)
            # Drained while the client (and its connection pool) is still open: only the
            # closed streams can have ended the leavers' requests.
            return results, left, await wait_for_drain(server, aborts_before, left)

    results, left, (running, blocks, aborts) = asyncio.run(run())
    assert left == STREAMS // 4
    for i, (leaves, chunks) in enumerate(results):
        if leaves:
            # It left while its request was generating (no finish, no usage yet).
            assert len(chunks) == LEAVE_AFTER_CHUNKS
            assert all(c.choices and c.choices[0].finish_reason is None for c in chunks), f"stream {i}"
        else:
            check_complete(i, chunks)

    # The engine drained: nothing running, no KV block owned, every leaver aborted.
    assert running == 0
    assert blocks == 0
    assert server.metric("pagedllm:num_requests_waiting") == 0
    assert aborts == left
    finished = server.metric("pagedllm:request_success_total", 'finished_reason="length"') - length_before
    assert finished == STREAMS - left


def test_clients_that_time_out_on_whole_completions_free_their_requests(busy_server):
    # A non-streaming client that gives up (its timeout closes the connection) while its
    # n = 2 request generates: the engine aborts the request (one per prompt, whatever n).
    server = busy_server
    clients = 8
    aborts_before = server.metric("pagedllm:request_success_total", ABORTED)

    async def give_up(client, model, i):
        try:
            await client.completions.create(model=model, prompt=f"Essay {i}:", max_tokens=LEAVER_MAX_TOKENS, n=2,
                                            temperature=0.8, seed=i, extra_body={"ignore_eos": True}, timeout=0.5)
        except openai.APITimeoutError:
            return True
        return False

    async def run():
        async with server.async_client() as client:
            model = (await client.models.list()).data[0].id
            timed_out = await asyncio.wait_for(
                asyncio.gather(*(give_up(client, model, i) for i in range(clients))), STREAMS_TIMEOUT_S)
            return timed_out, await wait_for_drain(server, aborts_before, clients)

    timed_out, (running, blocks, aborts) = asyncio.run(run())
    assert all(timed_out), timed_out
    assert running == 0
    assert blocks == 0
    assert aborts == clients
