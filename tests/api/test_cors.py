"""CORS (server.cors; docs/server.md "CORS") on a real pagedllm-host: preflights, answers, errors and SSE
streams through a plain HTTP client and the official openai client (which sends the page's Origin as any
header), and a real browser — Debian's headless Chromium — running a page from another origin that calls
the API with fetch(), preflight and streamed answer included, while a page from an origin not listed is
stopped by the browser."""

import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

API_KEY = "cors-key"
BROWSER = "chromium-headless-shell"  # Debian's package of that name (scripts/setup.sh installs it)
BROWSER_TIMEOUT_S = 60
PROMPT = [{"role": "user", "content": "Hello"}]
ANSWER = "Hello from the server."


class PageServer:
    """The pages' origin: serves one page at / and collects what the page reports to POST /report.
    Reached as http://127.0.0.1:PORT (the origin the API allows) and as http://localhost:PORT (another
    origin, since an origin is scheme, host and port as written)."""

    def __init__(self):
        self.page = ""
        self.reports = []
        self._reported = threading.Condition()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = outer.page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                report = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(204)
                self.end_headers()
                with outer._reported:
                    outer.reports.append(report)
                    outer._reported.notify_all()

            def log_message(self, *args):
                pass

        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def wait_for_report(self, timeout):
        deadline = time.monotonic() + timeout
        with self._reported:
            while not self.reports:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._reported.wait(left)
            return self.reports.pop(0)

    def close(self):
        self._http.shutdown()
        self._http.server_close()


@pytest.fixture(scope="module")
def pages():
    server = PageServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def cors_server(start_server, pages):
    """A host that allows the pages' 127.0.0.1 origin only, with an API key."""
    host = start_server([f"server.api_key={API_KEY}", "server.max_request_body=64KiB",
                         f"server.cors.allowed_origins=['http://127.0.0.1:{pages.port}']",
                         "server.cors.max_age_s=90"])
    yield host
    assert host.stop() == 0, host.log()


def allowed_origin(pages):
    return f"http://127.0.0.1:{pages.port}"


def preflight_headers(origin):
    return {"Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}


def test_preflight_from_an_allowed_origin_is_answered_without_the_key(cors_server, pages):
    with cors_server.http() as http_client:
        response = http_client.options("/v1/chat/completions", headers=preflight_headers(allowed_origin(pages)))
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == allowed_origin(pages)
    assert response.headers["access-control-allow-methods"] == "GET, POST, OPTIONS"
    assert response.headers["access-control-allow-headers"] == "authorization, content-type"
    assert response.headers["access-control-max-age"] == "90"
    assert response.headers["vary"] == "Origin"


def test_preflight_from_another_origin_is_refused_naming_it(cors_server, pages):
    other = f"http://localhost:{pages.port}"
    with cors_server.http() as http_client:
        response = http_client.options("/v1/chat/completions", headers=preflight_headers(other))
    assert response.status_code == 403
    assert other in response.json()["error"]["message"]
    assert "access-control-allow-origin" not in response.headers


def test_answers_errors_and_streams_carry_the_header_for_an_allowed_origin_only(cors_server, pages):
    origin = allowed_origin(pages)
    args = dict(model=None, messages=PROMPT, max_tokens=40, temperature=0, extra_body={"guided_choice": [ANSWER]})
    with cors_server.client(api_key=API_KEY, default_headers={"Origin": origin}) as client:
        args["model"] = client.models.list().data[0].id
        raw = client.chat.completions.with_raw_response.create(**args)
        assert raw.headers["access-control-allow-origin"] == origin
        assert raw.parse().choices[0].message.content == ANSWER
        # An SSE stream carries it in its header.
        raw = client.chat.completions.with_raw_response.create(**args, stream=True)
        assert raw.headers["access-control-allow-origin"] == origin
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices) == ANSWER
    # Errors carry it too, so the page can read why: a wrong key (401) and a bad field (400).
    with cors_server.http() as http_client:
        response = http_client.post("/v1/chat/completions", json={"messages": PROMPT},
                                    headers={"Origin": origin, "Authorization": "Bearer wrong"})
        assert response.status_code == 401
        assert response.headers["access-control-allow-origin"] == origin
        response = http_client.post("/v1/chat/completions", json={"messages": PROMPT, "temperature": "hot"},
                                    headers={"Origin": origin, "Authorization": f"Bearer {API_KEY}"})
        assert response.status_code == 400
        assert response.headers["access-control-allow-origin"] == origin
        # A body over the limit is refused after its header, which names the origin.
        response = http_client.post("/v1/chat/completions", content=b"x" * (80 * 1024),
                                    headers={"Origin": origin, "Authorization": f"Bearer {API_KEY}",
                                             "Content-Type": "application/json"})
        assert response.status_code == 413
        assert response.headers["access-control-allow-origin"] == origin
        # Another origin's request is answered (CORS is the browser's rule) but names no origin.
        response = http_client.post("/v1/chat/completions",
                                    json={"messages": PROMPT, "max_tokens": 2, "temperature": 0},
                                    headers={"Origin": f"http://localhost:{pages.port}",
                                             "Authorization": f"Bearer {API_KEY}"})
        assert response.status_code == 200
        assert "access-control-allow-origin" not in response.headers


def test_without_cors_config_no_origin_is_named(server):
    """The suite's shared server has no server.cors: a preflight is an OPTIONS like any other."""
    with server.http() as http_client:
        response = http_client.options("/v1/chat/completions", headers=preflight_headers("http://127.0.0.1:1"))
        assert response.status_code == 405
        assert "access-control-allow-origin" not in response.headers
        response = http_client.get("/health", headers={"Origin": "http://127.0.0.1:1"})
        assert response.status_code == 200
        assert "access-control-allow-origin" not in response.headers


# The page: a streamed chat completion with the API key (Authorization and a JSON body make the browser
# preflight first), read through the stream's reader, then a report of what it got to its own origin.
PAGE = """<script>
(async () => {
  const report = {};
  try {
    const response = await fetch(API + "/v1/chat/completions", {
      method: "POST",
      headers: {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"},
      body: JSON.stringify({messages: MESSAGES, max_tokens: 40, temperature: 0, stream: true,
                            guided_choice: [ANSWER]}),
    });
    report.status = response.status;
    const reader = response.body.getReader(), decoder = new TextDecoder();
    let text = "";
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      text += decoder.decode(value, {stream: true});
    }
    report.content = text.split("\\n\\n").filter(e => e.startsWith("data: {"))
        .map(e => JSON.parse(e.slice(6))).map(c => c.choices.length ? (c.choices[0].delta.content || "") : "")
        .join("");
    report.done = text.includes("data: [DONE]");
  } catch (error) {
    report.error = error.name + ": " + error.message;
  }
  await fetch("/report", {method: "POST", body: JSON.stringify(report)});
})();
</script>"""


def run_page_in_browser(pages, page_url, api_url, tmp_path):
    pages.page = (f"<script>const API = {json.dumps(api_url)}, KEY = {json.dumps(API_KEY)}, "
                  f"MESSAGES = {json.dumps(PROMPT)}, ANSWER = {json.dumps(ANSWER)};</script>\n" + PAGE)
    browser = shutil.which(BROWSER)
    assert browser, f"{BROWSER} is not installed (scripts/setup.sh installs it)"
    # Root needs --no-sandbox; a fresh profile per run keeps no preflight cache between runs. The browser
    # runs in its own process group, so that its helper processes end with it.
    log_path = tmp_path / "browser.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                    f"--user-data-dir={tmp_path / 'profile'}", page_url],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    try:
        report = pages.wait_for_report(BROWSER_TIMEOUT_S)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert report is not None, \
        f"the page reported nothing within {BROWSER_TIMEOUT_S} s:\n{log_path.read_text(errors='replace')[-3000:]}"
    return report


def test_a_browser_page_from_an_allowed_origin_streams_an_answer(cors_server, pages, tmp_path):
    report = run_page_in_browser(pages, f"{allowed_origin(pages)}/", cors_server.url, tmp_path)
    assert report == {"status": 200, "content": ANSWER, "done": True}


def test_a_browser_stops_a_page_from_an_origin_not_listed(cors_server, pages, tmp_path):
    finished_before = cors_server.metric("pagedllm:request_success_total")
    report = run_page_in_browser(pages, f"http://localhost:{pages.port}/", cors_server.url, tmp_path)
    # fetch() rejects with a TypeError: the preflight's 403 stopped the browser before the request.
    assert report["error"].startswith("TypeError")
    assert cors_server.metric("pagedllm:request_success_total") == finished_before
