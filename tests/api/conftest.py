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
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from served_process import ServedProcess  # noqa: E402

MAKE_TINY_LLAMA = ROOT / "tools" / "testing" / "make_tiny_llama.py"


def _required_env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through ctest (pagedllm_api_python)", pytrace=False)
    return value


class Server(ServedProcess):
    """One pagedllm-host process serving `config` on a free port, with --set `overrides`."""

    def __init__(self, host_binary, config, overrides, log_path):
        args = [host_binary, "--config", str(config), "--set", "server.port=0"]
        for override in overrides:
            args += ["--set", override]
        super().__init__(args, log_path, "pagedllm-host")


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
