"""A service replica for the end-to-end tests: a threaded stdlib HTTP server on the service's port.

GET / answers `replica <FERRY_REPLICA_NUM> <VERSION>`; /slow?s=N answers after N seconds; /health answers 200
unless the file `unhealthy` exists in the working directory. Started by the service's commands as
`python3 replica_server.py PORT VERSION` (the host's own Python).
"""

import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PORT = int(sys.argv[1])
VERSION = sys.argv[2] if len(sys.argv) > 2 else "v1"
WHO = f"replica {os.environ.get('FERRY_REPLICA_NUM', '?')} {VERSION}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body in one send, without Nagle's delay: else each answer waits ~40 ms for an ACK.
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/health":
            status = 503 if os.path.exists("unhealthy") else 200
            self._answer(status, "unhealthy" if status == 503 else "ok")
            return
        if url.path == "/slow":
            time.sleep(float(parse_qs(url.query).get("s", ["1"])[0]))
        self._answer(200, WHO)

    def _answer(self, status: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


ThreadingHTTPServer.daemon_threads = True
print(f"{WHO} listening on {PORT}", flush=True)
ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
