"""Notifications end to end (issue 20, docs/runs.md#notifications), on the embedded stack: a real run's
webhooks reach a real HTTP server in this process, signed with a secret set by `ferry secret set`, in the
run's order; the first delivery, answered 500, comes again under the same X-Ferry-Delivery id; and a run
whose receiver is down still ends DONE (its notifications are never in its way). The embedded stack posts
to a receiver on 127.0.0.1 since it allows private webhooks by default; one started with
FERRY_WEBHOOKS_ALLOW_PRIVATE=0 refuses it and says why (docs/deployment.md#webhooks).
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.notifications import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, signature_matches
from tests.e2e.conftest import FERRY, ROOT, Ferry, ferry_env, last_line, stack_of, task

KEY = "hook-key-7f3a91c2"


@dataclass
class Receiver:
    """What a webhook got: (delivery id, event header, signature header, body) per request, in arrival
    order; the first request is answered 500, the others 204."""

    requests: list[tuple[str, str, str, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    receiver.requests.append(
                        (
                            self.headers[DELIVERY_HEADER],
                            self.headers[EVENT_HEADER],
                            self.headers.get(SIGNATURE_HEADER, ""),
                            body,
                        )
                    )
                    first = len(receiver.requests) == 1
                self.send_response(500 if first else 204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def bodies(self) -> list[dict[str, object]]:
        with self.lock:
            return [json.loads(body) for *_, body in self.requests]


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    found = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), found.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found, f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


def set_secret(ferry: Ferry, name: str, value: str) -> None:
    added = subprocess.run(
        [*FERRY, "secret", "set", name], cwd=ROOT, env=ferry.env, input=value.encode(), capture_output=True
    )
    assert added.returncode == 0, added.stderr


def test_a_run_s_webhook_gets_each_event_signed_in_order_and_a_failed_one_again(
    ferry: Ferry, tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    got, url = receiver
    set_secret(ferry, "HOOK_KEY", KEY)
    hook = f"notifications:\n  - url: {url}\n    secret: ${{{{ secrets.HOOK_KEY }}}}\n"
    done = ferry("apply", "-y", "-f", task(tmp_path, "hooked", "echo hi", extra=hook))
    assert done.returncode == 0, done.stderr
    for _ in range(600):  # the run's end reaches the receiver (a bound, not a timing assertion)
        if any(body["event"] == "finished" for body in got.bodies()):
            break
        time.sleep(0.1)
    requests, bodies = list(got.requests), got.bodies()
    # The first, answered 500, came again with the same id; then each event once, in the run's order.
    assert requests[0][0] == requests[1][0] == f"{bodies[0]['run_id']}-0"
    delivered = bodies[1:]
    # Each status change of the run's eventlog (`ferry events --json`, the pull form) once, in order.
    log = [json.loads(line) for line in ferry("events", "hooked", "--json").stdout.splitlines()]
    changes = [
        (seq, "submitted" if event["name"] == "submit" else event["context"]["status"])
        for seq, event in enumerate(log)
        if event["name"] in ("submit", "status", "clean")
    ]
    assert [(b["seq"], b["status"]) for b in delivered] == changes
    assert [b["previous_status"] for b in delivered] == [None, *(status for _, status in changes[:-1])]
    assert [b["event"] for b in delivered] == ["status"] * (len(changes) - 1) + ["finished"]
    assert [(b["status"], b["reason"], b["message"]) for b in delivered[-1:]] == [
        ("done", "all_jobs_done", "all jobs done")
    ]
    assert [b["timestamp"] for b in delivered] == [log[seq]["timestamp"] for seq, _ in changes]
    assert {(b["run"], b["project"]) for b in delivered} == {("hooked", "main")}
    for (delivery, kind, signed, body), parsed in zip(requests, bodies, strict=True):
        assert signature_matches(KEY, body, signed)
        assert (delivery, kind) == (f"{parsed['run_id']}-{parsed['seq']}", parsed["event"])


def test_a_run_whose_receiver_is_down_still_ends_done(ferry: Ferry, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hook = f"notifications:\n  - url: http://127.0.0.1:{port}/hook\n"
    done = ferry("apply", "-y", "-f", task(tmp_path, "unheard", "echo hi", extra=hook))
    assert done.returncode == 0, done.stderr
    assert last_line(done.stderr) == "run unheard: done (all jobs done)"


def test_a_notification_naming_a_secret_not_set_is_refused(ferry: Ferry, tmp_path: Path) -> None:
    hook = "notifications:\n  - url: http://127.0.0.1:9/\n    secret: ${{ secrets.NOT_SET }}\n"
    refused = ferry("apply", "-y", "-f", task(tmp_path, "unsigned", "echo hi", extra=hook))
    assert refused.returncode != 0
    assert "NOT_SET" in refused.stderr


def test_a_stack_that_refuses_private_webhooks_refuses_the_run_before_submission(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    """FERRY_WEBHOOKS_ALLOW_PRIVATE=0 reaches the stack's API, which refuses a literal loopback webhook in
    one line before anything is submitted (a host name is resolved and checked by the worker as it posts:
    tests/activities/test_notifications.py)."""
    got, url = receiver
    home = tmp_path_factory.mktemp("ferry-home-refusing")
    env = {**ferry_env(home), "FERRY_WEBHOOKS_ALLOW_PRIVATE": "0"}  # reaches the stack's API and worker
    with stack_of(Ferry(home, env)) as ferry:
        hook = f"notifications:\n  - url: {url}\n"
        refused = ferry("apply", "-y", "-f", task(tmp_path, "refused", "echo hi", extra=hook))
        assert refused.returncode == 2, refused.stderr
        said = f"ferry apply: run refused: notifications: {url}: 127.0.0.1 is a loopback address: refused"
        assert last_line(refused.stderr).startswith(said), refused.stderr
        assert "FERRY_WEBHOOKS_ALLOW_PRIVATE=1 allows" in last_line(refused.stderr)
        listed = ferry("ps", "-a", "--json")
        assert json.loads(listed.stdout) == []  # nothing submitted
    assert got.requests == []
