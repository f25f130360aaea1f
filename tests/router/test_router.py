"""pagedllm-router in front of real pagedllm-host replicas (conftest.py), driven by the openai client.
The oracle is a replica asked directly: the router must answer as it does."""

import json
import signal
import socket
import threading

import openai
import pytest

from conftest import wait_for

# A system prompt of many blocks, shared by every request of the affinity test.
SHARED_PREFIX = "# A careful Python reviewer checks every function twice.\n" * 12


def model_of(client):
    return client.models.list().data[0].id


def chat_text(client, model, messages, stream, max_tokens=24):
    answer = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=max_tokens,
                                            stream=stream)
    if not stream:
        return answer.choices[0].message.content
    return "".join(chunk.choices[0].delta.content or "" for chunk in answer if chunk.choices)


def completion_text(client, model, prompt, stream, max_tokens=24):
    answer = client.completions.create(model=model, prompt=prompt, temperature=0, max_tokens=max_tokens,
                                       stream=stream)
    if not stream:
        return answer.choices[0].text
    return "".join(chunk.choices[0].text for chunk in answer if chunk.choices)


def test_answers_equal_a_replicas_own(cluster):
    with cluster.replicas[0].client() as direct, cluster.router.client() as routed:
        model = model_of(direct)
        assert model_of(routed) == model
        messages = [{"role": "system", "content": SHARED_PREFIX}, {"role": "user", "content": "def fibonacci(n):"}]
        for stream in (False, True):
            expected = chat_text(direct, model, messages, stream)
            assert expected
            assert chat_text(routed, model, messages, stream) == expected
            expected = completion_text(direct, model, "def add(a, b):", stream)
            assert expected
            assert completion_text(routed, model, "def add(a, b):", stream) == expected


def requests_per_replica(cluster):
    return {r.url: cluster.router.metric("pagedllm_router:replica_requests_total", f'replica="{r.url}"')
            for r in cluster.replicas}


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_requests_sharing_a_prefix_land_on_one_replica(cluster, kind):
    """The router renders each prompt as the host does (a chat through the model's template) and keeps the
    prompts sharing a prefix on the replica that computed it."""
    with cluster.replicas[0].http() as http:
        prefix_tokens = http.post("/tokenize", json={"prompt": SHARED_PREFIX}).json()["count"]
    shared_blocks = prefix_tokens // 16
    assert shared_blocks >= 8
    users = 6
    with cluster.router.client() as routed:
        model = model_of(routed)
        hits_before = {r.url: r.metric("pagedllm:prefix_cache_hits_total") for r in cluster.replicas}
        sent_before = requests_per_replica(cluster)
        affinity_before = cluster.router.metric("pagedllm_router:replica_affinity_hits_total")
        for user in range(users):
            if kind == "completion":
                completion_text(routed, model, SHARED_PREFIX + f"def user_{user}_function(x):", False, max_tokens=2)
            else:
                messages = [{"role": "system", "content": "[chat] " + SHARED_PREFIX},
                            {"role": "user", "content": f"def user_{user}_function(x):"}]
                chat_text(routed, model, messages, False, max_tokens=2)
    sent = {url: count - sent_before[url] for url, count in requests_per_replica(cluster).items()}
    chosen = [url for url, count in sent.items() if count > 0]
    assert len(chosen) == 1, sent
    assert sent[chosen[0]] == users
    assert cluster.router.metric("pagedllm_router:replica_affinity_hits_total") - affinity_before == users - 1
    # The replica's own prefix cache served the shared blocks of every request after the first.
    hits = {r.url: r.metric("pagedllm:prefix_cache_hits_total") - hits_before[r.url] for r in cluster.replicas}
    # (The block holding the prefix's last token may differ as the rest of the prompt is tokenized with it.)
    assert hits[chosen[0]] >= (users - 1) * (shared_blocks - 1) * 16, hits
    assert all(hits[url] == 0 for url in hits if url != chosen[0]), hits


def test_errors_have_the_hosts_shape(cluster):
    replica, router = cluster.replicas[0], cluster.router
    cases = [("POST", "/v1/completions", b"{not json"), ("POST", "/v1/chat/completions", b"[1, 2]"),
             ("GET", "/v1/nothing", None), ("GET", "/v1/completions", None), ("PUT", "/health", None)]
    with replica.http() as direct, router.http() as routed:
        for method, path, body in cases:
            expected = direct.request(method, path, content=body, headers={"content-type": "application/json"})
            actual = routed.request(method, path, content=body, headers={"content-type": "application/json"})
            assert 400 <= expected.status_code < 500
            assert actual.status_code == expected.status_code, (method, path, actual.text)
            assert actual.json() == expected.json(), (method, path)
            assert actual.headers.get("allow") == expected.headers.get("allow")
        # Limits the router applies as the host does (its default body limit is the replicas'): 413 and 431.
        oversized_body = b'{"prompt": "' + b"x" * (9 << 20) + b'"}'
        for body, headers in ((oversized_body, {}), (b"{}", {"x-padding": "a" * (17 << 10)})):
            expected = direct.post("/v1/completions", content=body, headers=headers)
            actual = routed.post("/v1/completions", content=body, headers=headers)
            assert expected.status_code in (413, 431)
            assert actual.status_code == expected.status_code
            assert actual.json() == expected.json()
        # A request the replica refuses (no messages) is forwarded and refused by it, word for word.
        model = direct.get("/v1/models").json()["data"][0]["id"]
        expected = direct.post("/v1/chat/completions", json={"model": model})
        actual = routed.post("/v1/chat/completions", json={"model": model})
        assert expected.status_code == 400
        assert actual.status_code == expected.status_code
        assert actual.json() == expected.json()


def test_client_disconnect_cancels_the_replicas_request(cluster):
    aborted_before = sum(r.metric("pagedllm:request_success_total", 'finished_reason="abort"')
                         for r in cluster.replicas)
    disconnects_before = cluster.router.metric("pagedllm_router:client_disconnects_total")
    body = {"prompt": "def long_function():", "max_tokens": 400, "ignore_eos": True, "stream": True,
            "temperature": 0}
    with cluster.router.http() as http:
        with http.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            next(response.iter_bytes())  # the stream has begun; leave
    wait_for(lambda: cluster.router.metric("pagedllm_router:client_disconnects_total") > disconnects_before,
             "the router to notice the client leaving")
    wait_for(lambda: sum(r.metric("pagedllm:request_success_total", 'finished_reason="abort"')
                         for r in cluster.replicas) > aborted_before, "the replica to abort the request")
    wait_for(lambda: cluster.router.metric("pagedllm_router:replica_in_flight") == 0, "nothing in flight")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_replica_available_is_a_503(fresh_cluster):
    router = fresh_cluster.start_router([f"http://127.0.0.1:{free_port()}"])
    with router.http() as http:
        health = http.get("/health")
        assert health.status_code == 503
        assert health.json()["error"]["code"] == "no_replica_available"
    with router.client() as routed:
        with pytest.raises(openai.APIStatusError) as error:
            routed.completions.create(model="m", prompt="def f():", max_tokens=2)
    assert error.value.status_code == 503
    assert "No replica is available" in error.value.message
    assert router.metric("pagedllm_router:replica_up") == 0


def test_a_killed_replica_is_routed_around(fresh_cluster):
    """Two requests with one prompt on one replica (affinity puts the second beside the first): a plain one, and
    a stream that has begun. The replica is killed: the plain request is retried on the other replica and
    answered in full, the stream ends with the router's error event, the replica is shown down and the other
    one serves what follows. 32 choices of 440 tokens each keep both requests running long enough."""
    replicas = [fresh_cluster.start_replica() for _ in range(2)]
    router = fresh_cluster.start_router([r.url for r in replicas])
    wait_for(lambda: router.metric("pagedllm_router:replica_up") == 2, "both replicas up")
    prompt = "# a function the replica dies computing\n" * 4 + "def killed(x):"
    long_request = {"prompt": prompt, "max_tokens": 440, "temperature": 0, "n": 32, "logprobs": 5,
                    "extra_body": {"ignore_eos": True}}
    with replicas[0].client() as direct:
        model = model_of(direct)
        expected = direct.completions.create(model=model, **long_request).choices[0].text

    plain = {}
    stream = {"chunks": 0}
    stream_begun = threading.Event()

    def send_plain():
        with router.client() as routed:
            try:
                plain["text"] = routed.completions.create(model=model, **long_request).choices[0].text
            except openai.APIError as e:
                plain["error"] = e

    def send_stream():
        with router.client() as routed:
            try:
                for _ in routed.completions.create(model=model, stream=True, **long_request):
                    stream["chunks"] += 1
                    stream_begun.set()
                stream["completed"] = True
            except openai.APIError as e:
                stream["error"] = e
            stream_begun.set()

    def in_flight(replica):
        return router.metric("pagedllm_router:replica_in_flight", f'replica="{replica.url}"')

    plain_thread = threading.Thread(target=send_plain)
    plain_thread.start()
    wait_for(lambda: in_flight(replicas[0]) + in_flight(replicas[1]) == 1, "the plain request in flight")
    stream_thread = threading.Thread(target=send_stream)
    stream_thread.start()
    assert stream_begun.wait(60) and stream["chunks"] > 0, stream
    victim = next(r for r in replicas if in_flight(r) == 2)
    survivor = next(r for r in replicas if r is not victim)
    victim.process.send_signal(signal.SIGKILL)
    plain_thread.join()
    stream_thread.join()

    assert plain.get("text") == expected, plain
    assert "completed" not in stream and "error" in stream, stream
    assert "failed while streaming" in str(stream["error"])
    # The router counts a broken stream once its error event is written: the client may read it first.
    wait_for(lambda: router.metric("pagedllm_router:failed_streams_total") == 1, "the broken stream counted")
    assert router.metric("pagedllm_router:retries_total") == 1
    assert router.metric("pagedllm_router:replica_up", f'replica="{victim.url}"') == 0
    assert router.metric("pagedllm_router:replica_up", f'replica="{survivor.url}"') == 1
    assert router.metric("pagedllm_router:replica_failures_total", f'replica="{victim.url}"') == 2
    with router.http() as http:
        health = http.get("/health")
        assert health.status_code == 200 and health.json()["replicas_up"] == 1
    # Everything after goes to the survivor, answered as before.
    before = router.metric("pagedllm_router:replica_requests_total", f'replica="{survivor.url}"')
    with router.client() as routed:
        for stream_flag in (False, True):
            assert completion_text(routed, model, "def add(a, b):", stream_flag) == \
                completion_text(routed, model, "def add(a, b):", not stream_flag)
    assert router.metric("pagedllm_router:replica_requests_total", f'replica="{survivor.url}"') == before + 4
    victim.stop()


def refuses_connections(url):
    host, port = url.removeprefix("http://").rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        return False
    except ConnectionRefusedError:
        return True


def test_sigterm_lets_requests_in_flight_finish(fresh_cluster):
    replica = fresh_cluster.start_replica()
    # A grace period no build outlasts: under ASan the request below takes minutes, and a drain cut short by
    # the period is another case (a second signal's), not this one.
    router = fresh_cluster.start_router([replica.url], server_options=", shutdown_grace_period_s: 3600")
    wait_for(lambda: router.metric("pagedllm_router:replica_up") == 1, "the replica up")
    long_request = {"prompt": "def drained(x):", "max_tokens": 440, "temperature": 0, "n": 32,
                    "extra_body": {"ignore_eos": True}}
    with replica.client() as direct:
        model = model_of(direct)
        expected = direct.completions.create(model=model, **long_request).choices[0].text
    result = {}

    def send():
        with router.client() as routed:
            result["text"] = routed.completions.create(model=model, **long_request).choices[0].text

    thread = threading.Thread(target=send)
    thread.start()
    wait_for(lambda: router.metric("pagedllm_router:replica_in_flight") == 1, "the request in flight")
    router.process.send_signal(signal.SIGTERM)
    wait_for(lambda: refuses_connections(router.url), "the router to stop accepting connections")
    thread.join()
    assert result.get("text") == expected
    assert router.process.wait(timeout=30) == 0
