"""Harness for the router tests: real pagedllm-host replicas serving configs/tiny.yaml (the embedded
model) on free ports, a real pagedllm-router in front of them, and the official openai client.

ctest (pagedllm_router_python, tests/router/CMakeLists.txt) runs `PAGEDLLM_PYTHON -m pytest tests/router`
with these variables set:

    PAGEDLLM_HOST         the pagedllm-host binary
    PAGEDLLM_ROUTER       the pagedllm-router binary
    PAGEDLLM_PLUGIN_DIR   the directory holding the built plugins
    PAGEDLLM_ROUTER_WORK  a scratch directory (configs and logs go there)

Nothing here skips: a missing package or variable fails the run.
"""

import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY_CONFIG = ROOT / "configs" / "tiny.yaml"
TINY_MODEL = ROOT / "models" / "pagedllm-tiny"

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
REQUEST_TIMEOUT_S = 120
LISTENING = re.compile(r"listening on (http://\S+)")


def _required_env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through ctest (pagedllm_router_python)", pytrace=False)
    return value


class Process:
    """A pagedllm-host or pagedllm-router; the constructor returns once it prints its bound address."""

    def __init__(self, args, log_path, name):
        self.name = name
        self.log_path = log_path
        self._stderr = open(log_path, "wb")
        env = dict(os.environ, PAGEDLLM_PLUGIN_PATH=_required_env("PAGEDLLM_PLUGIN_DIR"))
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=self._stderr, env=env)
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
                pytest.fail(f"{self.name} did not start within {START_TIMEOUT_S} s:\n{self.log()}", pytrace=False)
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                code = self.process.wait(timeout=STOP_TIMEOUT_S)
                pytest.fail(f"{self.name} exited with {code} before listening:\n{self.log()}", pytrace=False)
            match = LISTENING.search(line)
            if match:
                return match.group(1)

    def log(self):
        if not self._stderr.closed:
            self._stderr.flush()
        return "".join(self.stdout) + Path(self.log_path).read_text(errors="replace")

    def client(self):
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0, timeout=REQUEST_TIMEOUT_S,
                             http_client=openai.DefaultHttpx2Client(trust_env=False))

    def http(self):
        return httpx2.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S, trust_env=False)

    def metrics(self):
        with self.http() as http:
            response = http.get("/metrics")
        assert response.status_code == 200, response.text
        return response.text

    def metric(self, name, label_filter=""):
        """The sum of the samples `name{...}` (or `name`) whose labels contain label_filter."""
        total = None
        for line in self.metrics().split("\n"):
            if (line.startswith(name + "{") or line.startswith(name + " ")) and label_filter in line:
                total = (total or 0) + float(line[line.rindex(" ") + 1:])
        assert total is not None, f"no sample {name}{{{label_filter}}} in /metrics"
        return total

    def stop(self, sig=signal.SIGTERM):
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout=STOP_TIMEOUT_S)
        self._stderr.close()
        return code


def wait_for(condition, what, timeout_s=60):
    """Polls condition() until it is true (not a timed assertion: the bound only keeps a broken run finite)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}", pytrace=False)
        time.sleep(0.05)


class Cluster:
    """Starts replicas and routers in the work directory; stop() ends them all."""

    def __init__(self, work):
        self.work = work
        self.processes = []
        self.count = 0

    def start_replica(self, overrides=()):
        self.count += 1
        args = [_required_env("PAGEDLLM_HOST"), "--config", str(TINY_CONFIG), "--set", "server.port=0",
                "--set", "logging.level=warn", "--set", "model.options.num_threads=1",
                "--set", "attention.options.num_threads=1"]
        for override in overrides:
            args += ["--set", override]
        replica = Process(args, self.work / f"replica{self.count}.log", "pagedllm-host")
        self.processes.append(replica)
        return replica

    def start_router(self, replica_urls, extra_yaml=""):
        self.count += 1
        config = self.work / f"router{self.count}.yaml"
        replicas = "".join(f"  - url: {url}\n" for url in replica_urls)
        config.write_text(f"model: {{path: {TINY_MODEL}}}\n"
                          f"replicas:\n{replicas}"
                          "routing: {block_size: 16}\n"
                          "health: {interval_s: 0.2, timeout_s: 2}\n"
                          "server: {host: 127.0.0.1, port: 0}\n"
                          "logging: {level: info}\n" + extra_yaml)
        router = Process([_required_env("PAGEDLLM_ROUTER"), "--config", str(config)],
                         self.work / f"router{self.count}.log", "pagedllm-router")
        self.processes.append(router)
        return router

    def stop(self):
        for process in reversed(self.processes):
            process.stop()


@pytest.fixture(scope="session")
def work_dir():
    work = Path(_required_env("PAGEDLLM_ROUTER_WORK"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


@pytest.fixture(scope="session")
def cluster(work_dir):
    """Three replicas and a router in front of them, shared by the tests that leave them running."""
    cluster = Cluster(work_dir)
    cluster.replicas = [cluster.start_replica() for _ in range(3)]
    cluster.router = cluster.start_router([r.url for r in cluster.replicas])
    wait_for(lambda: cluster.router.metric("pagedllm_router:replica_up") == 3, "the router to see 3 replicas up")
    yield cluster
    cluster.stop()


@pytest.fixture()
def fresh_cluster(work_dir):
    """A cluster of its own, for a test that kills part of it."""
    cluster = Cluster(work_dir)
    yield cluster
    cluster.stop()


def pytest_sessionfinish(session, exitstatus):
    # Nothing in this suite may skip: a skip would hide an untested path behind exit 0.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and reporter.stats.get("skipped") and session.exitstatus == 0:
        session.exitstatus = 1
