"""A served pagedllm process for the Python tests (tests/api, tests/router): started with its stdout read to the
end by a thread (so it never blocks on a full pipe), ready once it prints "listening on URL", and reached through
the official openai client, a plain HTTP client and its /metrics page."""

import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import openai
import pytest

START_TIMEOUT_S = 60  # process start (model load) to "listening on"
STOP_TIMEOUT_S = 30   # a signal to exit (the configs' grace period is 10 s)
REQUEST_TIMEOUT_S = 120  # any one HTTP request, streamed or not

LISTENING = re.compile(r"listening on (http://\S+)")


class ServedProcess:
    """One process; the constructor returns once it prints its bound address (`url`). `must_exit`: stop() fails
    the test when the process outlives STOP_TIMEOUT_S after the signal, rather than killing it quietly."""

    def __init__(self, args, log_path, name, env=None, must_exit=True):
        self.name = name
        self.log_path = log_path
        self.must_exit = must_exit
        self._stderr = open(log_path, "wb")
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
                url = match.group(1)
                # Only loopback traffic: every test config binds 127.0.0.1.
                assert url.startswith("http://127.0.0.1:"), url
                return url

    def log(self):
        if not self._stderr.closed:
            self._stderr.flush()
        return "".join(self.stdout) + Path(self.log_path).read_text(errors="replace")

    def client(self, api_key="none", **options):
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0, timeout=REQUEST_TIMEOUT_S,
                             http_client=openai.DefaultHttpx2Client(trust_env=False), **options)

    def async_client(self, api_key="none", **options):
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0,
                                  timeout=REQUEST_TIMEOUT_S,
                                  http_client=openai.DefaultAsyncHttpx2Client(trust_env=False), **options)

    def http(self):
        """A plain HTTP client for what the openai client has no method for."""
        return httpx2.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S, trust_env=False)

    def metrics(self):
        with self.http() as http:
            response = http.get("/metrics")
        assert response.status_code == 200, response.text
        return response.text

    def metric(self, name, label_filter=""):
        """The sum of the samples `name{...}` (or `name`) whose labels contain label_filter; fails when there
        is none."""
        total = None
        for line in self.metrics().split("\n"):
            if (line.startswith(name + "{") or line.startswith(name + " ")) and label_filter in line:
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
            code = self.process.wait(timeout=STOP_TIMEOUT_S)
            if self.must_exit:
                pytest.fail(f"{self.name} did not exit within {STOP_TIMEOUT_S} s of {sig!r}:\n{self.log()}",
                            pytrace=False)
        self._stderr.close()
        return code
