#!/usr/bin/env python3
"""Soak test: a real pagedllm-host on loopback under a bounded, seeded mix of traffic
(docs/reliability.md "Soak").

    tools/soak/soak.py --host build/bin/pagedllm-host --requests 10000 --concurrency 64

Starts the host (configs/tiny.yaml unless --config, port 0), then `--concurrency`
clients, each on its own connection, send `--requests` requests in all (or stop at
`--max-seconds`): completions and chat, streamed and not, n > 1, stop strings, seeds,
logprobs, prompts over the context; 10 % of clients vanish mid-stream, 5 % send
malformed or out-of-bounds requests (bad JSON, wrong types, n / max_tokens / logprobs
out of range, raw malformed HTTP). Meanwhile /health is polled. Afterwards /metrics must
show nothing running, waiting, swapped or holding KV blocks; resident memory and open
descriptors of the host must be back within the bounds below of their level after
warm-up; SIGTERM must end the host with exit 0.

Exits 0 when nothing was violated, 1 with a summary of every violation otherwise,
2 on a usage error. Run it with the project's interpreter (scripts/python.sh).
"""

import argparse
import asyncio
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx2
import openai

ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"listening on (http://\S+)")
START_TIMEOUT_S = 120
REQUEST_TIMEOUT_S = 120
IDLE_TIMEOUT_S = 20  # after the load: how long the engine may take to be empty
HEALTH_TIMEOUT_S = 10  # a /health answer slower than this is a violation

# Resident memory and descriptors after the run, against their level after warm-up:
# RSS may exceed it by RSS_SLACK_MIB (allocator arenas and caches settle; a leak of
# 4 KiB per request over 10,000 requests is 39 MiB and fails); descriptors may exceed
# the idle level before the load by FD_SLACK (none are expected: every connection closed).
RSS_SLACK_MIB = 24
FD_SLACK = 2

PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n\ndef main():",
    "class Stack:\n    def __init__(self):",
    "# Read a CSV file and print the sum of the second column\n",
    "def is_prime(n):\n    \"\"\"Return True if n is prime.\"\"\"",
    "for i in range(10):",
    "x = [",
    "",
]
STOPS = ["\n", "return", ":", "\n\n", "def ", ")"]


class Violations:
    def __init__(self):
        self.items = []
        self.lock = threading.Lock()

    def add(self, what):
        with self.lock:
            self.items.append(what)


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Host:
    def __init__(self, binary, config, overrides, log_path):
        args = [binary, "--config", str(config), "--set", "server.port=0"]
        for override in overrides:
            args += ["--set", override]
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log)
        self.url = None
        found = threading.Event()

        def read_stdout():
            for raw in self.process.stdout:
                match = LISTENING.search(raw.decode("utf-8", "replace"))
                if match and self.url is None:
                    self.url = match.group(1)
                    found.set()
            found.set()

        threading.Thread(target=read_stdout, daemon=True).start()
        if not found.wait(START_TIMEOUT_S) or self.url is None:
            self.process.kill()
            raise SystemExit(f"soak: pagedllm-host did not start:\n{self.log_tail()}")

    def log_tail(self, lines=40):
        self._log.flush()
        return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout):
        """SIGTERM; returns (exit code or None when it had to be killed, seconds)."""
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = None
        self._log.close()
        return code, time.monotonic() - started


def parse_metrics(text):
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return values


def split_responses(data):
    """(status, body) of each HTTP/1.1 response in `data`, bodies by Content-Length."""
    answers = []
    while data:
        head, separator, rest = data.partition(b"\r\n\r\n")
        match = re.match(rb"HTTP/1\.1 (\d{3}) ", head)
        if not separator or not match:
            break
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        size = int(length.group(1)) if length else 0
        answers.append((int(match.group(1)), rest[:size]))
        data = rest[size:]
    return answers


# ---- the traffic -------------------------------------------------------------------------------

class Soak:
    def __init__(self, args, host):
        self.args = args
        self.host = host
        self.violations = Violations()
        self.counts = Counter()
        self.next_request = 0
        self.done = 0
        self.deadline = time.monotonic() + args.max_seconds
        self.model = None
        self.max_model_len = None
        self.seeded_texts = {}  # (prompt index, seed) -> text of a seeded greedy-free request
        self.health_checks = 0
        self.health_max_s = 0.0
        self.rss_samples = []
        self.warm_rss_kib = None
        self.warm_fds = None

    def fail(self, kind, what):
        self.counts["unexpected:" + kind] += 1
        if self.counts["unexpected:" + kind] <= 5:
            self.violations.add(f"{kind}: {what}")

    def take(self):
        if self.next_request >= self.args.requests or time.monotonic() > self.deadline:
            return None
        self.next_request += 1
        return self.next_request - 1

    # -- valid requests through the official client --

    async def valid(self, client, rng):
        chat = rng.random() < 0.5
        stream = rng.random() < 0.5
        n = rng.choice([1, 1, 1, 2, 3])
        seeded = rng.random() < 0.4
        # Seeded requests repeat often enough for the determinism check below.
        max_tokens = rng.choice([8, 16]) if seeded else rng.randint(1, 48)
        body = {"n": n, "temperature": rng.choice([0.0, 0.7, 1.0])}
        extra = {}
        if rng.random() < 0.3:
            body["stop"] = rng.sample(STOPS, rng.randint(1, 3))
        if seeded:
            body["seed"] = rng.randint(0, 3)
        if rng.random() < 0.2:
            extra["ignore_eos"] = True
        if rng.random() < 0.2:
            body["presence_penalty"] = rng.uniform(-2, 2)
            body["frequency_penalty"] = rng.uniform(-2, 2)
            extra.update(top_k=rng.choice([-1, 1, 5, 50]), min_p=rng.uniform(0, 0.5),
                         repetition_penalty=rng.uniform(0.5, 2))
        if rng.random() < 0.05:
            extra.update(stop_token_ids=[rng.randrange(8192)], include_stop_str_in_output=True)
        prompt_index = rng.randrange(len(PROMPTS))
        prompt = PROMPTS[prompt_index]
        num_prompts = 1
        if chat:
            body["messages"] = [{"role": "user", "content": prompt or "Hello"}]
            if rng.random() < 0.3:
                body["logprobs"] = True
                body["top_logprobs"] = rng.randint(0, 5)
            call = client.chat.completions.create
        else:
            body["prompt"] = prompt
            draw = rng.random()
            if draw < 0.1 and not seeded:
                # Near the context: chunked prefill, and preemption when blocks run out.
                length = rng.randint(200, self.max_model_len - 1)
                body["prompt"] = [rng.randrange(1, 8000) for _ in range(length)]
                max_tokens = rng.randint(1, self.max_model_len - length)
                self.counts["near the context"] += 1
            elif draw < 0.2 and not seeded:
                num_prompts = rng.randint(2, 3)
                body["prompt"] = rng.sample(PROMPTS, num_prompts)
                self.counts["batched prompts"] += 1
            if rng.random() < 0.3:
                body["logprobs"] = rng.randint(0, 5)
                if rng.random() < 0.3:
                    body["echo"] = True
            call = client.completions.create
        body["max_tokens"] = max_tokens
        if stream:
            body["stream_options"] = {"include_usage": True}
        self.counts[f"{'chat' if chat else 'completion'}{' stream' if stream else ''}"] += 1
        choices = n * num_prompts
        texts = [""] * choices
        finish = [None] * choices
        usage = None
        if stream:
            response = await call(model=self.model, stream=True, extra_body=extra, **body)
            async for chunk in response:
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices:
                    piece = choice.delta.content if chat else choice.text
                    texts[choice.index] += piece or ""
                    if choice.finish_reason is not None:
                        if finish[choice.index] is not None:
                            self.fail("protocol", f"choice {choice.index} finished twice")
                        finish[choice.index] = choice.finish_reason
        else:
            response = await call(model=self.model, extra_body=extra, **body)
            usage = response.usage
            if len(response.choices) != choices:
                self.fail("protocol", f"{len(response.choices)} choices for {num_prompts} prompts, n={n}")
                return
            for choice in response.choices:
                texts[choice.index] = (choice.message.content if chat else choice.text) or ""
                finish[choice.index] = choice.finish_reason
                if body.get("logprobs") is not None and not chat and choice.logprobs is None:
                    self.fail("protocol", "logprobs asked, none returned")
        if any(reason not in ("stop", "length") for reason in finish):
            self.fail("protocol", f"finish reasons {finish} (chat={chat}, stream={stream})")
        if usage is None or not 0 <= usage.completion_tokens <= choices * max_tokens:
            self.fail("protocol", f"usage {usage} for {choices} choices, max_tokens={max_tokens}")
        # A seeded request's text is a function of its request alone, whatever shares its batch.
        if seeded and not extra and "stop" not in body and n == 1 and not chat and "echo" not in body:
            key = (prompt_index, body["seed"], body["temperature"], max_tokens, body.get("logprobs"))
            if key not in self.seeded_texts:
                self.seeded_texts[key] = texts[0]
            elif self.seeded_texts[key] != texts[0]:
                self.fail("determinism", f"seeded request {key} gave {texts[0]!r}, earlier {self.seeded_texts[key]!r}")
            else:
                self.counts["seeded repeats equal"] += 1

    async def over_context(self, client, rng):
        self.counts["prompt over the context"] += 1
        ids = [rng.randrange(1, 8000) for _ in range(self.max_model_len + rng.randint(1, 64))]
        try:
            await client.completions.create(model=self.model, prompt=ids, max_tokens=4,
                                            stream=rng.random() < 0.5)
        except openai.BadRequestError as error:
            if not isinstance(error.body, dict) or "message" not in error.body:
                self.fail("error body", f"over-context 400 without a JSON error: {error.body!r}")
            return
        self.fail("accepted", "a prompt over the context was accepted")

    # -- clients that leave --

    async def vanish(self, http, rng):
        self.counts["vanished mid-stream"] += 1
        chat = rng.random() < 0.5
        body = {"model": self.model, "stream": True, "max_tokens": rng.randint(32, 200), "n": rng.choice([1, 2]),
                "ignore_eos": True}
        if chat:
            body["messages"] = [{"role": "user", "content": rng.choice(PROMPTS) or "Hi"}]
        else:
            body["prompt"] = rng.choice(PROMPTS)
        path = "/v1/chat/completions" if chat else "/v1/completions"
        leave_after = rng.randint(1, 4)
        async with http.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                self.fail("status", f"stream to vanish from: {response.status_code}")
                return
            events = 0
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events += 1
                    if events >= leave_after:
                        break
        # Leaving the block with the body unread closes the connection.

    async def vanish_early(self, url, rng):
        """A client that leaves before its answer: after a whole non-streaming request (some
        with a reset instead of a FIN), or halfway through its body."""
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps({"model": self.model, "prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(16, 200),
                           "n": rng.choice([1, 3]), "ignore_eos": True}).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        half = rng.random() < 0.3
        reset = rng.random() < 0.5
        self.counts["vanished before the answer" + (" (half a body)" if half else " (reset)" if reset else "")] += 1
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(head + (body[:len(body) // 2] if half else body))
        await writer.drain()
        await asyncio.sleep(rng.uniform(0, 0.2))
        if reset:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    async def pipelined(self, url, rng):
        """Two requests written back to back on one connection: two answers, in order."""
        self.counts["pipelined pairs"] += 1
        host, port = url.removeprefix("http://").split(":")
        requests = b""
        for tokens in (3, 5):
            body = json.dumps({"model": self.model, "prompt": rng.choice(PROMPTS), "max_tokens": tokens,
                               "ignore_eos": True}).encode()
            requests += (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        requests += b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(requests)
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), REQUEST_TIMEOUT_S)
        finally:
            writer.close()
        answers = split_responses(data)
        statuses = [status for status, _ in answers]
        try:
            tokens = [json.loads(body)["usage"]["completion_tokens"] for _, body in answers[:2]]
        except (ValueError, KeyError, TypeError):
            tokens = None
        if statuses != [200, 200, 200] or tokens != [3, 5]:
            self.fail("pipelining", f"statuses {statuses}, completion tokens {tokens}")

    # -- malformed and out-of-bounds --

    def expect_json_error(self, kind, status, text):
        if not 400 <= status < 500:
            self.fail("status", f"{kind}: {status} (wanted 4xx) {text[:200]!r}")
            return
        try:
            error = json.loads(text)["error"]
            assert isinstance(error["message"], str) and error["message"]
            assert "type" in error and "code" in error and "param" in error
        except (ValueError, KeyError, TypeError, AssertionError):
            self.fail("error body", f"{kind}: {status} without a JSON error body: {text[:200]!r}")

    async def malformed_body(self, http, rng):
        completion = {"model": self.model, "prompt": "x", "max_tokens": 4}
        chat = {"model": self.model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
        cases = [
            ("bad JSON", "/v1/completions", b'{"prompt": "x", "max_tokens": 4'),
            ("bad JSON", "/v1/chat/completions", b'{"messages": [}'),
            ("not an object", "/v1/completions", b'[1, 2, 3]'),
            ("invalid UTF-8", "/v1/completions", b'{"prompt": "\xff\xfe", "max_tokens": 4}'),
            ("n = 0", "/v1/completions", {**completion, "n": 0}),
            ("n too large", "/v1/completions", {**completion, "n": 100000}),
            ("n too large", "/v1/chat/completions", {**chat, "n": 1 << 40}),
            ("max_tokens < 0", "/v1/completions", {**completion, "max_tokens": -1}),
            ("max_tokens over the context", "/v1/chat/completions", {**chat, "max_tokens": 10 ** 9}),
            ("logprobs too large", "/v1/completions", {**completion, "logprobs": 10 ** 6}),
            ("top_logprobs too large", "/v1/chat/completions", {**chat, "logprobs": True, "top_logprobs": 999}),
            ("wrong type", "/v1/completions", {**completion, "max_tokens": "many"}),
            ("wrong type", "/v1/completions", {**completion, "prompt": {"text": "x"}}),
            ("wrong type", "/v1/chat/completions", {**chat, "messages": "hello"}),
            ("wrong type", "/v1/chat/completions", {**chat, "temperature": [1]}),
            ("out of range", "/v1/completions", {**completion, "temperature": -3}),
            ("out of range", "/v1/completions", {**completion, "top_p": 7}),
            ("token id outside the vocabulary", "/v1/completions", {**completion, "prompt": [1, 2, 10 ** 9]}),
            ("bad role", "/v1/chat/completions", {**chat, "messages": [{"role": "wizard", "content": "x"}]}),
            ("stream not a bool", "/v1/completions", {**completion, "stream": "yes"}),
            ("too many stops", "/v1/completions", {**completion, "stop": [str(i) for i in range(40)]}),
            ("unknown model", "/v1/completions", {**completion, "model": "no-such-model"}),
            ("empty messages", "/v1/chat/completions", {**chat, "messages": []}),
        ]
        kind, path, body = rng.choice(cases)
        self.counts["malformed: " + kind] += 1
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        if rng.random() < 0.3 and isinstance(body, dict):
            content = json.dumps({**body, "stream": True}).encode() if "stream" not in body else content
        response = await http.post(path, content=content, headers={"Content-Type": "application/json"})
        self.expect_json_error(kind, response.status_code, response.text)

    async def unknown_fields(self, http, rng):
        # Unknown fields are ignored (as OpenAI does): a 200, not an error.
        self.counts["unknown fields (ignored)"] += 1
        body = {"model": self.model, "prompt": rng.choice(PROMPTS), "max_tokens": 3,
                "frobnicate": {"deep": [1, 2]}, "x-" + str(rng.randrange(1000)): None}
        response = await http.post("/v1/completions", json=body)
        if response.status_code != 200:
            self.fail("status", f"unknown fields: {response.status_code} {response.text[:200]!r}")

    async def raw_http(self, url, rng):
        host, port = url.removeprefix("http://").split(":")
        valid = b'{"prompt": "x", "max_tokens": 2}'
        cases = [
            ("garbage request line", b"HELLO THERE\r\n\r\n"),
            ("bad version", b"GET /health HTTP/7.1\r\nHost: x\r\n\r\n"),
            ("bad Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n"),
            ("two Content-Lengths", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                                    b"Content-Length: 4\r\n\r\nabcd"),
            ("bad chunk size", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                               b"zz\r\nabc\r\n0\r\n\r\n"),
            ("header too large", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"),
            ("body too large", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n"),
            ("NUL in a header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n"),
            ("no colon in a header", b"POST /v1/completions HTTP/1.1\r\nHost x\r\nContent-Length: "
                                     + str(len(valid)).encode() + b"\r\n\r\n" + valid),
        ]
        kind, payload = rng.choice(cases)
        self.counts["raw HTTP: " + kind] += 1
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(payload)
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), REQUEST_TIMEOUT_S)
        except (ConnectionResetError, BrokenPipeError) as error:
            self.fail("raw HTTP", f"{kind}: connection reset without an answer ({error})")
            return
        finally:
            writer.close()
        match = re.match(rb"HTTP/1\.1 (\d{3}) ", data)
        if not match:
            self.fail("raw HTTP", f"{kind}: no HTTP answer: {data[:120]!r}")
            return
        head, _, body = data.partition(b"\r\n\r\n")
        if b"transfer-encoding: chunked" in head.lower():
            self.fail("raw HTTP", f"{kind}: an error answer in chunks")
            return
        self.expect_json_error("raw HTTP " + kind, int(match.group(1)), body.decode("utf-8", "replace"))

    # -- the clients --

    async def client_loop(self, worker):
        rng = random.Random(self.args.seed * 1000003 + worker)
        client = openai.AsyncOpenAI(base_url=f"{self.host.url}/v1", api_key="none", max_retries=0,
                                    timeout=REQUEST_TIMEOUT_S,
                                    http_client=openai.DefaultAsyncHttpx2Client(
                                        trust_env=False, limits=httpx2.Limits(max_connections=1)))
        http = httpx2.AsyncClient(base_url=self.host.url, timeout=REQUEST_TIMEOUT_S, trust_env=False,
                                  limits=httpx2.Limits(max_connections=1))
        try:
            while (index := self.take()) is not None:
                draw = rng.random()
                try:
                    if draw < 0.10:
                        await self.vanish(http, rng)
                    elif draw < 0.13:
                        await self.malformed_body(http, rng)
                    elif draw < 0.15:
                        await self.raw_http(self.host.url, rng)
                    elif draw < 0.16:
                        await self.unknown_fields(http, rng)
                    elif draw < 0.18:
                        await self.over_context(client, rng)
                    elif draw < 0.20:
                        await self.vanish_early(self.host.url, rng)
                    elif draw < 0.21:
                        await self.pipelined(self.host.url, rng)
                    else:
                        await self.valid(client, rng)
                except openai.APIError as error:
                    self.fail("request", f"request {index}: {type(error).__name__}: {error}")
                except (httpx2.HTTPError, OSError, asyncio.TimeoutError) as error:
                    self.fail("request", f"request {index}: {type(error).__name__}: {error}")
                self.done += 1
        finally:
            await client.close()
            await http.aclose()

    def poll_health(self, stop):
        """On a thread of its own with a blocking client, so that a busy event loop of the
        clients cannot pass for a slow server. Each check may take HEALTH_TIMEOUT_S."""
        with httpx2.Client(base_url=self.host.url, timeout=HEALTH_TIMEOUT_S, trust_env=False) as http:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    response = http.get("/health")
                    if response.status_code != 200:
                        self.fail("health", f"/health answered {response.status_code}: {response.text[:200]}")
                except httpx2.HTTPError as error:
                    self.fail("health", f"/health: {type(error).__name__} after {time.monotonic() - sent:.1f} s")
                self.health_max_s = max(self.health_max_s, time.monotonic() - sent)
                self.health_checks += 1
                stop.wait(0.2)

    async def progress(self, stop, started):
        pid = self.host.process.pid
        last = 0.0
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass
            if self.host.process.poll() is not None:
                self.fail("host", f"pagedllm-host exited with {self.host.process.returncode} during the load")
                return
            rss = rss_kib(pid)
            self.rss_samples.append(rss)
            if self.warm_rss_kib is None and self.done >= self.args.warmup:
                self.warm_rss_kib, self.warm_fds = rss, open_fds(pid)
            now = time.monotonic()
            if now - last >= self.args.progress_s:
                last = now
                elapsed = now - started
                unexpected = sum(v for k, v in self.counts.items() if k.startswith("unexpected:"))
                print(f"soak: {self.done}/{self.args.requests} requests, {elapsed:.0f} s, "
                      f"{self.done / max(elapsed, 1e-9):.1f} req/s, {unexpected} unexpected, "
                      f"RSS {rss / 1024:.1f} MiB, {open_fds(pid)} fds, load {os.getloadavg()[0]:.1f}", flush=True)

    async def run(self):
        async with httpx2.AsyncClient(base_url=self.host.url, timeout=30, trust_env=False) as http:
            models = (await http.get("/v1/models")).json()["data"]
            self.model = models[0]["id"]
            self.max_model_len = models[0]["max_model_len"]
            idle_fds = open_fds(self.host.process.pid)
            idle_rss = rss_kib(self.host.process.pid)
        print(f"soak: {self.host.url} serving {self.model} (max_model_len {self.max_model_len}), pid "
              f"{self.host.process.pid}; idle: RSS {idle_rss / 1024:.1f} MiB, {idle_fds} fds", flush=True)
        started = time.monotonic()
        stop = asyncio.Event()
        health_stop = threading.Event()
        health = threading.Thread(target=self.poll_health, args=(health_stop,))
        health.start()
        watchers = [asyncio.create_task(self.progress(stop, started))]
        await asyncio.gather(*(self.client_loop(w) for w in range(self.args.concurrency)))
        duration = time.monotonic() - started
        stop.set()
        health_stop.set()
        health.join()
        await asyncio.gather(*watchers)
        return duration, idle_fds, idle_rss

    async def settle(self):
        """Waits for the engine to be empty; returns the last /metrics."""
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        async with httpx2.AsyncClient(base_url=self.host.url, timeout=10, trust_env=False) as http:
            while True:
                metrics = parse_metrics((await http.get("/metrics")).text)
                busy = {name: metrics.get("pagedllm:" + name, -1) for name in
                        ("num_requests_running", "num_requests_waiting", "num_requests_swapped",
                         "kv_cache_blocks_in_use")}
                if all(value == 0 for value in busy.values()) or time.monotonic() > deadline:
                    return metrics, busy
                await asyncio.sleep(0.2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default=str(ROOT / "build" / "bin" / "pagedllm-host"), help="pagedllm-host binary")
    parser.add_argument("--config", default=str(ROOT / "configs" / "tiny.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a --set for the host, after the soak's own (cache.kv_cache_bytes=32MiB, "
                             "logging.level=warn, the grace period)")
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-seconds", type=float, default=1800, help="stop sending after this long")
    parser.add_argument("--warmup", type=int, default=None,
                        help="requests after which RSS and fds are the reference (default: a tenth)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress-s", type=float, default=10)
    parser.add_argument("--grace-s", type=float, default=30, help="SIGTERM to exit, at most")
    parser.add_argument("--log", default=None, help="the host's stderr (default: a file in /tmp)")
    parser.add_argument("--json", default=None, help="write the summary here")
    parser.add_argument("--no-rss-check", action="store_true",
                        help="for a host under AddressSanitizer, whose quarantine keeps freed memory resident by "
                             "design (LeakSanitizer's check at exit, a non-zero exit, stands in)")
    args = parser.parse_args()
    if args.requests < 1 or args.concurrency < 1:
        parser.error("--requests and --concurrency must be positive")
    if args.warmup is None:
        args.warmup = min(args.requests, max(300, args.requests // 10))

    log = args.log or f"/tmp/pagedllm-soak-{os.getpid()}.log"
    # A small KV pool: attention_cpu's pool is uninitialised memory that becomes resident as
    # blocks are first used, so warm-up must cycle through all of it before RSS means anything
    # (and a small pool makes long prompts preempt).
    host = Host(args.host, args.config, ["cache.kv_cache_bytes=32MiB", "logging.level=warn", f"server.shutdown_grace_period_s={args.grace_s / 2}",
                                         *args.set], log)
    soak = Soak(args, host)
    try:
        duration, idle_fds, idle_rss = asyncio.run(soak.run())
        metrics, busy = asyncio.run(soak.settle())
    except BaseException:
        host.stop(args.grace_s)
        raise
    pid = host.process.pid
    end_rss, end_fds = rss_kib(pid), open_fds(pid)
    for name, value in busy.items():
        if value != 0:
            soak.fail("metrics", f"pagedllm:{name} = {value} {IDLE_TIMEOUT_S} s after the load")
    warm_rss = soak.warm_rss_kib if soak.warm_rss_kib is not None else idle_rss
    if not args.no_rss_check and end_rss > warm_rss + RSS_SLACK_MIB * 1024:
        soak.fail("memory", f"RSS {end_rss / 1024:.1f} MiB after the load, {warm_rss / 1024:.1f} MiB after warm-up "
                            f"(bound: + {RSS_SLACK_MIB} MiB)")
    if end_fds > idle_fds + FD_SLACK:
        soak.fail("descriptors", f"{end_fds} open descriptors after the load, {idle_fds} before it "
                                 f"(bound: + {FD_SLACK})")
    if soak.done < args.requests:
        soak.fail("bound", f"only {soak.done} of {args.requests} requests within --max-seconds {args.max_seconds}")
    code, stop_s = host.stop(args.grace_s)
    if code != 0:
        soak.fail("exit", f"pagedllm-host exited with {code} after SIGTERM ({stop_s:.1f} s)")

    unexpected = {k.removeprefix("unexpected:"): v for k, v in soak.counts.items() if k.startswith("unexpected:")}
    summary = {
        "requests": soak.done, "concurrency": args.concurrency, "duration_s": round(duration, 1),
        "requests_per_s": round(soak.done / duration, 1), "unexpected_failures": sum(unexpected.values()),
        "health_checks": soak.health_checks, "health_max_s": round(soak.health_max_s, 2),
        "rss_mib": {"idle": round(idle_rss / 1024, 1), "after_warmup": round(warm_rss / 1024, 1),
                    "max": round(max(soak.rss_samples or [end_rss]) / 1024, 1), "after": round(end_rss / 1024, 1)},
        "fds": {"idle": idle_fds, "after_warmup": soak.warm_fds, "after": end_fds},
        "load_average": [round(x, 2) for x in os.getloadavg()], "sigterm_exit": code,
        "sigterm_s": round(stop_s, 2),
        "mix": {k: v for k, v in sorted(soak.counts.items()) if not k.startswith("unexpected:")},
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    if soak.violations.items:
        print(f"soak: FAILED, {sum(unexpected.values())} violations ({unexpected}); the first of each kind:",
              file=sys.stderr)
        for item in soak.violations.items:
            print("  " + item, file=sys.stderr)
        print(f"the host's log: {log}", file=sys.stderr)
        return 1
    print(f"soak: OK: {soak.done} requests in {duration:.1f} s, no violation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
