"""A webhook posted by the activity (activities/notifications.py, docs/deployment.md#webhooks): a host that
is or resolves to a non-public address is refused at once, not retried, unless the deployment allows it;
the POST goes to the address that was checked, with the URL's host in `Host`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.notifications import NotificationActivities, Resolver
from core.configuration.notifications import NotificationKind
from core.notifications import Delivery, Notification
from core.status import RunStatus
from store import Store, open_store

NOTIFICATION = Notification(
    run="train", run_id="train-1", project="main", event=NotificationKind.STATUS, status=RunStatus.SUBMITTED,
    previous_status=None, timestamp=1.0, seq=0,
)  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path / 'ferry.db'}")
    yield opened
    opened.engine.dispose()


@pytest.fixture
def receiver() -> Iterator[tuple[list[str], int]]:
    """A webhook on 127.0.0.1: the Host header of each POST, and its port."""
    hosts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            hosts.append(self.headers["Host"])
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield hosts, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def resolving(table: dict[str, list[str]]) -> Resolver:
    async def resolve(host: str, port: int) -> list[str]:
        return table[host]

    return resolve


async def deliver(activities: NotificationActivities, url: str) -> int:
    delivery = Delivery(url=url, notification=NOTIFICATION)
    return int(await ActivityEnvironment().run(activities.deliver_notification, delivery))


@pytest.mark.parametrize(
    ("url", "addresses", "says"),
    [
        (
            "http://127.0.0.1:9/hook",
            ["127.0.0.1"],
            "http://127.0.0.1:9/hook: 127.0.0.1 is a loopback address",
        ),
        ("http://[::1]/hook", ["::1"], "::1 is a loopback address"),
        (
            "http://metadata.test/",
            ["169.254.169.254"],
            "metadata.test resolves to 169.254.169.254, a link-local",
        ),
        ("https://hooks.test/x", ["93.184.216.34", "10.0.0.7"], "hooks.test resolves to 10.0.0.7, a private"),
    ],
)
async def test_a_non_public_address_is_refused_at_once(
    store: Store, url: str, addresses: list[str], says: str
) -> None:
    activities = NotificationActivities(store, resolver=resolving({httpx.URL(url).host: addresses}))
    with pytest.raises(ApplicationError) as refused:
        await deliver(activities, url)
    assert refused.value.non_retryable
    assert says in str(refused.value) and "\n" not in str(refused.value)
    assert "FERRY_WEBHOOKS_ALLOW_PRIVATE=1" in str(refused.value)


async def test_allowed_the_post_goes_to_the_checked_address_with_the_url_s_host(
    store: Store, receiver: tuple[list[str], int]
) -> None:
    hosts, port = receiver
    # A name the test's resolver answers, as the check saw it: no second lookup decides where it goes.
    activities = NotificationActivities(
        store, allow_private=True, resolver=resolving({"hooks.test": ["127.0.0.2", "127.0.0.1"]})
    )
    assert await deliver(activities, f"http://hooks.test:{port}/hook") == 204
    assert hosts == [f"hooks.test:{port}"]
    # With the system's resolver: a literal address resolves to itself.
    assert (
        await deliver(NotificationActivities(store, allow_private=True), f"http://127.0.0.1:{port}/") == 204
    )
    assert hosts == [f"hooks.test:{port}", f"127.0.0.1:{port}"]


async def test_a_name_that_does_not_resolve_is_retried(store: Store) -> None:
    async def unknown(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(ApplicationError) as failed:
        await deliver(NotificationActivities(store, resolver=unknown), "http://nowhere.test/")
    assert not failed.value.non_retryable
    assert str(failed.value) == "http://nowhere.test/: cannot resolve nowhere.test: Name or service not known"
