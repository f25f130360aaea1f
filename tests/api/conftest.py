"""Harness for the API tests: a real pagedllm-host serving a tiny random Llama on
127.0.0.1, reached through the official openai Python client.

ctest (pagedllm_api_python, tests/server/CMakeLists.txt) runs
`PAGEDLLM_PYTHON -m pytest tests/api` with these variables set:

    PAGEDLLM_HOST        the pagedllm-host binary
    PAGEDLLM_PLUGIN_DIR  the directory holding the built plugins
    PAGEDLLM_API_WORK    a scratch directory (the model and config go there)

Nothing here skips: a missing package or variable fails the run.
"""

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE_TINY_LLAMA = ROOT / "tools" / "testing" / "make_tiny_llama.py"

START_TIMEOUT_S = 60  # host start (model load) to "listening on"
STOP_TIMEOUT_S = 30   # SIGTERM to exit (the config's grace period is 10 s)
REQUEST_TIMEOUT_S = 60  # any one HTTP request, streamed or not

LISTENING = re.compile(r"listening on (http://\S+)")


def _required_env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through ctest (pagedllm_api_python)", pytrace=False)
    return value


class Server:
    """One pagedllm-host process. start() returns once it prints its bound address."""

    def __init__(self, host_binary, config, overrides, log_path):
        self.log_path = log_path
        args = [host_binary, "--config", str(config), "--set", "server.port=0"]
        for override in overrides:
            args += ["--set", override]
        self._stderr = open(log_path, "wb")
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=self._stderr)
        # stdout is read to its end by a thread, so the host never blocks on a full pipe.
        self._lines = queue.Queue()
        self.stdout = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self.url = self._wait_for_address()

    def _read_stdout(self):
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace")
            self.stdout.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def _wait_for_address(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
                pytest.fail(f"pagedllm-host did not start within {START_TIMEOUT_S} s:\n{self.log()}", pytrace=False)
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                code = self.process.wait(timeout=STOP_TIMEOUT_S)
                pytest.fail(f"pagedllm-host exited with {code} before listening:\n{self.log()}", pytrace=False)
            match = LISTENING.search(line)
            if match:
                url = match.group(1)
                # Only loopback traffic: the config binds 127.0.0.1.
                assert url.startswith("http://127.0.0.1:"), url
                return url

    def log(self):
        if not self._stderr.closed:
            self._stderr.flush()
        return "".join(self.stdout) + Path(self.log_path).read_text(errors="replace")

    def client(self, api_key="none", **options):
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0,
                             timeout=REQUEST_TIMEOUT_S,
                             http_client=openai.DefaultHttpx2Client(trust_env=False), **options)

    def async_client(self, api_key="none", **options):
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0,
                                  timeout=REQUEST_TIMEOUT_S,
                                  http_client=openai.DefaultAsyncHttpx2Client(trust_env=False), **options)

    def http(self):
        """A plain HTTP client for what the openai client has no method for."""
        return httpx2.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S, trust_env=False)

    def metric(self, name, label_filter=""):
        """The value of a Prometheus sample `name{...}`, summed over the label sets
        that contain label_filter; fails when there is none."""
        with self.http() as http:
            response = http.get("/metrics")
        assert response.status_code == 200
        total = None
        for line in response.text.split("\n"):
            if line.startswith(name + "{") and label_filter in line:
                total = (total or 0) + float(line[line.rindex(" ") + 1:])
        assert total is not None, f"no sample {name}{{{label_filter}}} in /metrics"
        return total

    def stop(self, sig=signal.SIGTERM):
        """Sends sig and returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)
            pytest.fail(f"pagedllm-host did not exit within {STOP_TIMEOUT_S} s of {sig!r}:\n{self.log()}",
                        pytrace=False)
        self._stderr.close()
        return code


@pytest.fixture(scope="session")
def serve_config():
    """Generates the tiny model with this interpreter and writes the serving config
    (the same for every server; tests add --set overrides)."""
    plugins = _required_env("PAGEDLLM_PLUGIN_DIR")
    work = Path(_required_env("PAGEDLLM_API_WORK"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    subprocess.run([sys.executable, str(MAKE_TINY_LLAMA), "--max-position-embeddings", "16384", str(work / "tiny")],
                   check=True, stdout=subprocess.DEVNULL, timeout=120)
    config = work / "serve.yaml"
    config.write_text(
        "model: {plugin: models_llama, path: tiny}\n"
        "attention: {plugin: attention_cpu}\n"
        "sampler: {plugin: sampler}\n"
        "constraint: {plugin: constraint_xgrammar}\n"
        "cache: {block_size: 16, kv_cache_bytes: 64MiB, enable_prefix_caching: true}\n"
        "scheduler: {max_num_seqs: 64, max_num_batched_tokens: 2048}\n"
        "server: {host: 127.0.0.1, port: 0, shutdown_grace_period_s: 10}\n"
        f"plugins: {{search_paths: [{plugins}]}}\n"
        "logging: {level: warn}\n")
    return config


@pytest.fixture(scope="session")
def start_server(serve_config):
    """start_server(overrides) starts a host; the test stops it (asserting exit 0)."""
    host = _required_env("PAGEDLLM_HOST")
    count = 0

    def start(overrides=()):
        nonlocal count
        count += 1
        return Server(host, serve_config, list(overrides), serve_config.parent / f"host{count}.log")

    return start


def pytest_sessionfinish(session, exitstatus):
    # Nothing in this suite may skip: a skip would hide an untested path behind exit 0.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and reporter.stats.get("skipped") and session.exitstatus == 0:
        session.exitstatus = 1


API_KEY = "test-key"
MAX_MODEL_LEN = 512
MAX_REQUEST_BODY = 64 * 1024


@pytest.fixture(scope="session")
def server(start_server):
    """The server the completion, chat and error tests share: an API key, a 64 KiB body
    limit and a 512-token context. SIGTERM at the end must give exit code 0."""
    host = start_server([f"server.api_key={API_KEY}", "server.max_request_body=64KiB",
                         f"scheduler.max_model_len={MAX_MODEL_LEN}"])
    yield host
    assert host.stop() == 0, host.log()


@pytest.fixture(scope="session")
def client(server):
    with server.client(api_key=API_KEY) as c:
        yield c


@pytest.fixture(scope="session")
def model(client):
    return client.models.list().data[0].id
