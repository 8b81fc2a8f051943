"""A stand-in for Dynamo's frontend and its workers, for tests/e2e/test_dynamo_router.py: threaded stdlib
HTTP servers (the host's own Python).

`python3 dynamo_router_server.py router PORT`: the frontend on the service's PORT, and on 2379 the
stand-in for the etcd its workers register with (`POST /register`, a JSON body). Its GET /workers lists
the registrations, each with the address the worker reached it at; any other GET is answered `frontend
(N workers)`.

`python3 dynamo_router_server.py worker PORT GROUP`: registers with the router at
$DSTACK_ROUTER_INTERNAL_IP:2379 (its group and the address it was given), then serves GET on PORT
(`worker GROUP`), where its probes find it.
"""

import json
import os
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROLE, PORT = sys.argv[1], int(sys.argv[2])
GROUP = sys.argv[3] if len(sys.argv) > 3 else "-"
REGISTRY_PORT = 2379
REGISTERED: list[dict[str, object]] = []
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if ROLE == "worker":
            self._answer(200, f"worker {GROUP}")
        elif self.path == "/workers":
            with LOCK:
                listed = list(REGISTERED)
            self._answer(200, json.dumps(listed), "application/json")
        else:
            with LOCK:
                count = len(REGISTERED)
            self._answer(200, f"frontend ({count} workers)")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        # The address this connection reached: the router's, as the worker dialled it.
        body["reached_at"] = self.connection.getsockname()[0]
        with LOCK:
            REGISTERED.append(body)
        self._answer(200, "registered")

    def _answer(self, status: int, text: str, kind: str = "text/plain") -> None:
        data = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def register() -> None:
    address = os.environ["DSTACK_ROUTER_INTERNAL_IP"]
    body = {"group": GROUP, "told": address, "ferry_told": os.environ.get("FERRY_ROUTER_INTERNAL_IP")}
    request = urllib.request.Request(
        f"http://{address}:{REGISTRY_PORT}/register",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


if ROLE == "router":
    registry = ThreadingHTTPServer(("0.0.0.0", REGISTRY_PORT), Handler)
    threading.Thread(target=registry.serve_forever, daemon=True).start()
else:
    register()
ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
