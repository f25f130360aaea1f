"""pagedllm-host as the structured-output benchmarks drive it: started on a free port, an HTTP
client on it, stopped afterwards; and the numbers its /metrics page reports."""
import contextlib
import re
import subprocess
import sys

import httpx2 as httpx


@contextlib.contextmanager
def served_host(host, config, set_overrides):
    """Serves `config` with `host` (extra --set overrides) and yields (client, model id)."""
    args = [host, "--config", config, "--set", "server.port=0", "--set", "logging.level=warn",
            *[a for s in set_overrides for a in ("--set", s)]]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = None
        for line in process.stdout:
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                url = found.group(1)
                break
        if url is None:
            sys.exit("pagedllm-host exited before listening")
        with httpx.Client(base_url=url, timeout=600) as client:
            yield client, client.get("/v1/models").json()["data"][0]["id"]
    finally:
        process.terminate()
        process.wait(timeout=60)


def metric_samples(client):
    """The samples on /metrics (Prometheus' text format) by metric name, labels left out: the
    benchmarks serve one model, so each name they read has one series."""
    samples = {}
    for line in client.get("/metrics").text.split("\n"):
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name.split("{", 1)[0]] = float(value)
    return samples
