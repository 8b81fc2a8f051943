"""A proxy's domain (docs/deployment.md#https-on-a-domain): which service or models endpoint a request's
Host names, and the URL Ferry shows for a service. Pure: the proxy (gateway.app) and the CLI share it.

As dstack's gateway domain: a service at `<run>.<domain>`, the project's models at `gateway.<domain>`.
One Ferry proxy serves every project, so the project is in the host name unless it is the default one:
`<run>.<domain>` and `gateway.<domain>` are the default project's (core.settings.DEFAULT_PROJECT),
`<run>.<project>.<domain>` and `gateway.<project>.<domain>` another's. A run named `gateway` is reached
on its path URL only (the host is the models').
"""

from __future__ import annotations

from dataclasses import dataclass

from core.services.replicas import service_url
from core.settings import DEFAULT_PROJECT, Settings

MODELS_LABEL = "gateway"


@dataclass(frozen=True, slots=True)
class ServiceHost:
    project: str
    run_name: str


@dataclass(frozen=True, slots=True)
class ModelsHost:
    project: str


@dataclass(frozen=True, slots=True)
class UnknownHost:
    """Under the domain, but no name this rule knows (the domain itself, or too many labels)."""

    host: str


HostRoute = ServiceHost | ModelsHost | UnknownHost


def host_name(host: str) -> str:
    """A Host header's name: lower case, without its port or a final dot."""
    name = host.strip().lower()
    if name.startswith("["):  # an IPv6 literal: never under a domain
        return name
    return name.rpartition(":")[0].rstrip(".") if ":" in name else name.rstrip(".")


def route_host(host: str | None, domain: str | None) -> HostRoute | None:
    """What a request's Host names under `domain`; None when it is not under it (the path decides:
    /proxy/services/..., /proxy/models/...)."""
    if host is None or not domain:
        return None
    name = host_name(host)
    suffix = "." + domain.lower().rstrip(".")
    if not name.endswith(suffix):
        return None
    labels = name[: -len(suffix)].split(".")
    if len(labels) == 1 and labels[0]:
        project = DEFAULT_PROJECT
    elif len(labels) == 2 and all(labels):
        project = labels[1]
    else:
        return UnknownHost(name)
    if labels[0] == MODELS_LABEL:
        return ModelsHost(project)
    return ServiceHost(project, labels[0])


def _host(first: str, project: str, domain: str) -> str:
    return f"{first}.{domain}" if project == DEFAULT_PROJECT else f"{first}.{project}.{domain}"


def service_domain_url(domain: str, project: str, run_name: str, *, https: bool) -> str:
    """A service's URL on the domain: https on the proxy's TLS listener, http on its plain one (both as
    the deployment publishes them, on ports 443 and 80)."""
    return f"{'https' if https else 'http'}://{_host(run_name, project, domain)}/"


def models_domain_url(domain: str, project: str) -> str:
    """The OpenAI-compatible base URL of a project's models on the domain (`/v1/...` follows it)."""
    return f"https://{_host(MODELS_LABEL, project, domain)}/"


def shown_service_url(
    proxy_url: str | None, domain: str | None, project: str, run_name: str, https: bool | str = True
) -> str | None:
    """The URL Ferry shows for a service (`ferry apply`, `ferry ps`, the Web UI): on the domain when the
    proxy has one (`https: false` on its plain listener; `auto` as true, as dstack's default), else its
    path on the proxy's URL; None when neither is known (no proxy running)."""
    if domain:
        return service_domain_url(domain, project, run_name, https=https is not False)
    return None if proxy_url is None else service_url(proxy_url, project, run_name)


def https_note(domain: str | None, https_asked: bool) -> str | None:
    """The one line for a service that asks for `https: true` where the proxy has no domain to serve it
    on (docs/services.md#https): its path URL is shown instead, over the proxy's own scheme."""
    if domain or not https_asked:
        return None
    return "https: the proxy has no domain (FERRY_GATEWAY_DOMAIN), so the service is at its path URL above"


def configured_domain() -> str | None:
    """FERRY_GATEWAY_DOMAIN, as the proxy reads it (core.settings)."""
    return Settings.from_env().gateway_domain
