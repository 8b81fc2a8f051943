"""A stand-in for SGLang's router and its workers, for tests/e2e/test_service_router.py: a threaded stdlib
HTTP server on the service's port (the host's own Python).

`python3 sglang_router_server.py router PORT`: the subset of the router's HTTP API that Ferry uses
(docs/services.md#a-router-group): GET /workers (`{"workers": [{"id", "url", "worker_type",
"bootstrap_port"}], "total"}`), POST /workers (202 `{"status": "accepted", "worker_id"}`; 400 without a
url, or with a third argument `refuse`), DELETE /workers/{id} (202, or 404); GET /health. Any other GET
is forwarded to a registered worker (round robin) and answered `router -> <the worker's answer>`; 503
while it has none.

`python3 sglang_router_server.py worker PORT MODE`: GET /server_info says `disaggregation_mode` MODE
(prefill, with bootstrap port 8998, decode or null); any other GET answers `worker <replica> <MODE>`.
"""

import itertools
import json
import os
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROLE, PORT = sys.argv[1], int(sys.argv[2])
MODE = sys.argv[3] if len(sys.argv) > 3 else "null"
WHO = f"worker {os.environ.get('FERRY_REPLICA_NUM', '?')} {MODE}"
WORKERS: dict[str, dict[str, object]] = {}
LOCK = threading.Lock()
IDS = itertools.count(1)
TURN = itertools.count()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(200, "ok")
        elif ROLE == "worker":
            if self.path == "/server_info":
                info: dict[str, object] = {"status": "ready", "disaggregation_mode": MODE}
                if MODE == "prefill":
                    info["disaggregation_bootstrap_port"] = 8998
                self._answer(200, json.dumps(info), "application/json")
            else:
                self._answer(200, WHO)
        elif self.path == "/workers":
            with LOCK:
                listed = list(WORKERS.values())
            self._answer(200, json.dumps({"workers": listed, "total": len(listed)}), "application/json")
        else:
            self._forward()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if ROLE != "router" or self.path != "/workers" or not body.get("url") or MODE == "refuse":
            self._answer(400, json.dumps({"error": "a worker needs a url"}), "application/json")
            return
        worker_id = f"w{next(IDS)}"
        with LOCK:
            WORKERS[worker_id] = {"id": worker_id, **body}
        self._answer(202, json.dumps({"status": "accepted", "worker_id": worker_id}), "application/json")

    def do_DELETE(self) -> None:
        worker_id = self.path.rsplit("/", 1)[-1]
        with LOCK:
            found = WORKERS.pop(worker_id, None)
        if found is None:
            self._answer(404, json.dumps({"error": "no such worker"}), "application/json")
        else:
            self._answer(202, json.dumps({"status": "accepted"}), "application/json")

    def _forward(self) -> None:
        with LOCK:
            urls = sorted(str(w["url"]) for w in WORKERS.values())
        if not urls:
            self._answer(503, "no workers")
            return
        url = urls[next(TURN) % len(urls)]
        try:
            with urllib.request.urlopen(url.rstrip("/") + self.path, timeout=5) as answer:
                text = answer.read().decode().strip()
        except OSError as err:
            self._answer(502, f"worker {url}: {err}")
            return
        self._answer(200, f"router -> {text}")

    def _answer(self, status: int, text: str, kind: str = "text/plain") -> None:
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


ThreadingHTTPServer.daemon_threads = True
print(f"{ROLE} {MODE} listening on {PORT}", flush=True)
ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
