"""What the CLI shows of services (docs/services.md): a service's URL on a live proxy, each replica's probe
state, and the user's token that a service with `auth` asks for (`ferry token`)."""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.services.domains import configured_domain, shown_service_url
from core.services.probes import ProbeStatus, probe_summary
from core.services.replicas import token_hash

if TYPE_CHECKING:
    from core.configuration import ServiceConfiguration
    from store import RunRecord, Store

# A proxy heard from within this long is live (it heartbeats every second).
LIVE_PROXY = 5.0
TOKEN_FILE = "token"


@dataclass
class ServiceView:
    url: str | None  # None: no proxy is running
    replicas: dict[str, str] = field(default_factory=dict)  # job submission id -> "ready 1/1"


def service_line(store: Store, record: RunRecord, configuration: ServiceConfiguration) -> str:
    """Where the service answers, and what a request needs (docs/services.md)."""
    from core.services.domains import https_note

    base, domain = proxy_url(store), configured_domain()
    if base is None:
        return "service: no proxy is running (start one: ferry server start, or python -m gateway)"
    url = shown_service_url(base, domain, record.project, record.run_name, configuration.https)
    needs = " (send Authorization: Bearer $(ferry token))" if configuration.auth else ""
    # `https: true` written where the proxy has no domain: said, not dropped (docs/services.md#https).
    note = https_note(domain, "https" in configuration.model_fields_set and configuration.https is not False)
    return f"service at {url}{needs}" + ("" if note is None else "\n" + note)


def proxy_url(store: Store) -> str | None:
    """FERRY_GATEWAY_URL if set (a proxy behind another address), else the newest live proxy's URL."""
    configured = os.environ.get("FERRY_GATEWAY_URL")
    if configured:
        return configured.rstrip("/")
    live = store.live_gateways(time.time() - LIVE_PROXY)
    return live[0].url if live else None


def service_views(store: Store, runs: list[RunRecord]) -> dict[str, ServiceView]:
    """The services among `runs`, by run id."""
    services = [run for run in runs if run.type == "service"]
    if not services:
        return {}
    base, domain = proxy_url(store), configured_domain()
    views = {
        run.id: ServiceView(url=shown_service_url(base, domain, run.project, run.run_name, _https(run)))
        for run in services
    }
    for replica in store.list_service_replicas([run.id for run in services]):
        try:
            probes = [ProbeStatus.model_validate(p) for p in json.loads(replica.probes)]
        except ValueError:
            probes = []
        views[replica.run_id].replicas[replica.id] = probe_summary(replica.state, probes)
    return views


def _https(run: RunRecord) -> bool | str:
    """The run's `https` (dstack's default: true), which picks its URL's scheme on a domain."""
    try:
        configuration = json.loads(run.configuration)
    except (TypeError, ValueError):
        return True
    https = configuration.get("https", True) if isinstance(configuration, dict) else True
    return https if isinstance(https, bool | str) else True


def user_token(store: Store, home_token: os.PathLike[str], user: str, *, rotate: bool = False) -> str:
    """The user's token: the one kept in FERRY_HOME (created on first use, or anew with `rotate`), known to
    the store by its hash so that every proxy accepts it."""
    from embedded.processes import private_opener

    path = os.fspath(home_token)
    token = None
    if not rotate:
        try:
            with open(path) as kept:
                token = kept.read().strip() or None
        except FileNotFoundError:
            token = None
    if token is None:
        token = secrets.token_urlsafe(32)
        with open(path, "w", opener=private_opener) as out:
            out.write(token + "\n")
    digest = token_hash(token)
    stored = store.get_user(user)
    if stored is None or stored.token_hash != digest:
        store.put_user(user, digest)
    return token
