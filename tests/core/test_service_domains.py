"""The proxy's domain rule (core.services.domains, docs/deployment.md#https-on-a-domain): which service or
models endpoint a Host names, and the URL Ferry shows for a service."""

from __future__ import annotations

import pytest

from core.configuration import ServiceConfiguration
from core.configuration.loading import load_configuration_text
from core.services.domains import (
    ModelsHost,
    ServiceHost,
    UnknownHost,
    host_name,
    https_note,
    models_domain_url,
    route_host,
    service_domain_url,
    shown_service_url,
)
from core.settings import Settings


@pytest.mark.parametrize(
    ("host", "route"),
    [
        ("web.example.org", ServiceHost("main", "web")),
        ("WEB.Example.Org:443", ServiceHost("main", "web")),
        ("web.example.org.", ServiceHost("main", "web")),
        ("web.team.example.org", ServiceHost("team", "web")),
        ("gateway.example.org", ModelsHost("main")),
        ("gateway.team.example.org", ModelsHost("team")),
        ("a.b.c.example.org", UnknownHost("a.b.c.example.org")),
        (".example.org", UnknownHost(".example.org")),
        ("web..example.org", UnknownHost("web..example.org")),
        ("example.org", None),  # the domain itself is not under it: routed by path
        ("web.example.org.evil.test", None),
        ("webexample.org", None),
        ("127.0.0.1:8300", None),
        ("[::1]:8300", None),
        (None, None),
    ],
)
def test_a_host_names_a_service_the_models_or_nothing_under_the_domain(
    host: str | None, route: object
) -> None:
    assert route_host(host, "example.org") == route


def test_without_a_domain_every_request_is_routed_by_its_path() -> None:
    assert route_host("web.example.org", None) is None
    assert route_host("web.example.org", "") is None


def test_host_names() -> None:
    assert host_name(" Web.Example.org:8443 ") == "web.example.org"
    assert host_name("[::1]:80") == "[::1]:80"


def test_the_urls_on_a_domain() -> None:
    assert service_domain_url("example.org", "main", "web", https=True) == "https://web.example.org/"
    assert service_domain_url("example.org", "team", "web", https=False) == "http://web.team.example.org/"
    assert models_domain_url("example.org", "main") == "https://gateway.example.org/"
    assert models_domain_url("example.org", "team") == "https://gateway.team.example.org/"


def test_the_url_shown_follows_https_on_a_domain_else_the_path() -> None:
    proxy = "http://127.0.0.1:8300"
    assert shown_service_url(proxy, "example.org", "main", "web", True) == "https://web.example.org/"
    assert shown_service_url(proxy, "example.org", "main", "web", "auto") == "https://web.example.org/"
    assert shown_service_url(proxy, "example.org", "main", "web", False) == "http://web.example.org/"
    assert shown_service_url(proxy, None, "p", "web", True) == "http://127.0.0.1:8300/proxy/services/p/web/"
    assert shown_service_url(None, None, "p", "web", True) is None


def test_https_asked_without_a_domain_is_said_in_one_line() -> None:
    note = https_note(None, https_asked=True)
    assert note is not None and "\n" not in note and "FERRY_GATEWAY_DOMAIN" in note
    assert https_note("example.org", https_asked=True) is None
    assert https_note(None, https_asked=False) is None


def test_the_domain_setting() -> None:
    env = {"FERRY_HOME": "/tmp/ferry-home", "FERRY_GATEWAY_DOMAIN": " Example.ORG. "}
    assert Settings.from_env(env).gateway_domain == "example.org"
    assert Settings.from_env({"FERRY_HOME": "/tmp/ferry-home"}).gateway_domain is None


NEEDS = " (send Authorization: Bearer $(ferry token))"
PATH_URL = "http://127.0.0.1:8300/proxy/services/main/web/"


@pytest.mark.parametrize(
    ("domain", "https", "shown"),
    [
        ("example.org", "", [f"service at https://web.example.org/{NEEDS}"]),
        ("example.org", "https: false\n", [f"service at http://web.example.org/{NEEDS}"]),
        ("", "", [f"service at {PATH_URL}{NEEDS}"]),
        (
            "",
            "https: true\n",
            [
                f"service at {PATH_URL}{NEEDS}",
                "https: the proxy has no domain (FERRY_GATEWAY_DOMAIN), so the service is at its path URL "
                "above",
            ],
        ),
    ],
)
def test_ferry_apply_shows_the_url_https_asks_for(
    monkeypatch: pytest.MonkeyPatch, domain: str, https: str, shown: list[str]
) -> None:
    from cli.services import service_line
    from store.models import RunRecord

    monkeypatch.setenv("FERRY_GATEWAY_URL", "http://127.0.0.1:8300")  # no store read for the proxy's URL
    monkeypatch.setenv("FERRY_GATEWAY_DOMAIN", domain)
    text = "type: service\nport: 8000\ncommands: [serve]\n" + https
    configuration = load_configuration_text(text, "web.yml").configuration
    assert isinstance(configuration, ServiceConfiguration)
    record = RunRecord(
        id="r", project="main", run_name="web", user="u", type="service", status="running", workflow_id="w"
    )
    assert service_line(None, record, configuration).splitlines() == shown  # type: ignore[arg-type]
