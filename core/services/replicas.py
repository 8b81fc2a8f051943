"""Where users reach a service, and what the store keeps of a token; a replica's state as the proxies see
it is core.wire.services' `ReplicaState`."""

from __future__ import annotations

import hashlib

from core.wire.services import ReplicaState as ReplicaState  # re-exported: gateway/ names it here

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
