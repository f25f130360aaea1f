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
import shutil
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from served_process import ServedProcess  # noqa: E402

TINY_CONFIG = ROOT / "configs" / "tiny.yaml"
TINY_MODEL = ROOT / "models" / "pagedllm-tiny"


def _required_env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through ctest (pagedllm_router_python)", pytrace=False)
    return value


def start_process(args, log_path, name):
    """A pagedllm-host or pagedllm-router on the built plugins; stop() kills one that outlives its grace period
    (a replica a test has already killed, or one still draining at teardown)."""
    env = dict(os.environ, PAGEDLLM_PLUGIN_PATH=_required_env("PAGEDLLM_PLUGIN_DIR"))
    return ServedProcess(args, log_path, name, env=env, must_exit=False)


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
        replica = start_process(args, self.work / f"replica{self.count}.log", "pagedllm-host")
        self.processes.append(replica)
        return replica

    def start_router(self, replica_urls, extra_yaml="", server_options=""):
        """server_options: more keys of the router's `server` mapping, e.g. ", shutdown_grace_period_s: 600"."""
        self.count += 1
        config = self.work / f"router{self.count}.yaml"
        replicas = "".join(f"  - url: {url}\n" for url in replica_urls)
        config.write_text(f"model: {{path: {TINY_MODEL}}}\n"
                          f"replicas:\n{replicas}"
                          "routing: {block_size: 16}\n"
                          "health: {interval_s: 0.2, timeout_s: 2}\n"
                          f"server: {{host: 127.0.0.1, port: 0{server_options}}}\n"
                          "logging: {level: info}\n" + extra_yaml)
        router = start_process([_required_env("PAGEDLLM_ROUTER"), "--config", str(config)],
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
