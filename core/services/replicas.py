"""A service replica as the proxies see it, where users reach a service, and what the store keeps of a
token."""

from __future__ import annotations

import hashlib
from enum import StrEnum


class ReplicaState(StrEnum):
    PROBING = "probing"  # its job runs, its probes have not passed yet: no traffic
    READY = "ready"  # its probes pass: it gets new requests
    UNREADY = "unready"  # its probes failed after it was ready: no new requests until they pass again
    DRAINING = "draining"  # it is being stopped: no new requests, those in flight finish

    def gets_requests(self) -> bool:
        return self == ReplicaState.READY


SERVICES_PREFIX = "/proxy/services"
MODELS_PREFIX = "/proxy/models"


def service_path(project: str, run_name: str) -> str:
    """A service's path on every proxy (dstack's in-server path), with its trailing slash."""
    return f"{SERVICES_PREFIX}/{project}/{run_name}/"


def models_path(project: str) -> str:
    """The OpenAI-compatible base path of a project's models (`/v1/...` follows it)."""
    return f"{MODELS_PREFIX}/{project}/"


def service_url(gateway_url: str, project: str, run_name: str) -> str:
    return gateway_url.rstrip("/") + service_path(project, run_name)


def token_hash(token: str) -> str:
    """What the store keeps of a user's token (`ferry token`): its sha256, in hex."""
    return hashlib.sha256(token.encode()).hexdigest()
