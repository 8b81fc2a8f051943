"""HTTPS on a domain (docs/deployment.md#https-on-a-domain): the real proxy in-process with a plain and a
TLS listener, a test CA and certificates made here, and an httpx client that checks the certificate
against the CA for the host it names by SNI (connecting to 127.0.0.1)."""

from __future__ import annotations

import datetime
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.app import Gateway, make_runner
from gateway.main import parse_args, tls_context
from gateway.tls import server_context
from tests.gateway.conftest import FAST, Harness, add_replica, add_service, bearer, eventually

DOMAIN = "example.test"


@dataclass
class Pki:
    ca: Path
    cert: Path  # *.example.test
    key: Path
    certs_dir: Path  # web.other.example.test's own


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.with_suffix(".key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )


def _issue(
    ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, names: list[str]
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("Ferry test CA")
    now = datetime.datetime.now(datetime.UTC)
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(root / "ca.crt", ca)
    wildcard, wildcard_key = _issue(ca_key, ca_name, [f"*.{DOMAIN}", DOMAIN])
    _write(root / "wildcard.crt", wildcard, wildcard_key)
    certs_dir = root / "hosts"
    certs_dir.mkdir()
    own, own_key = _issue(ca_key, ca_name, [f"web.other.{DOMAIN}"])
    _write(certs_dir / f"web.other.{DOMAIN}.crt", own, own_key)
    return Pki(root / "ca.crt", root / "wildcard.crt", root / "wildcard.key", certs_dir)


@dataclass
class Proxy:
    plain: str  # http://127.0.0.1:<port>
    secure: str  # https://127.0.0.1:<port>


@pytest.fixture
async def proxy(harness: Harness, pki: Pki) -> Proxy:
    options = replace(FAST, domain=DOMAIN)
    gateway = Gateway(harness.store, public_url="http://proxy.test:8300", options=options)
    runner = make_runner(gateway)
    await runner.setup()
    harness.runners.append(runner)
    plain = gateway.site(runner, "127.0.0.1", 0)
    await plain.start()
    secure = gateway.site(
        runner, "127.0.0.1", 0, ssl_context=server_context(pki.cert, pki.key, pki.certs_dir)
    )
    await secure.start()
    return Proxy(f"http://127.0.0.1:{plain.port}", f"https://127.0.0.1:{secure.port}")


async def _get(
    client: httpx.AsyncClient, base: str, host: str, path: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    """GET `path` at the proxy on `base` (127.0.0.1) as if at `host`: its Host and, over TLS, its SNI, so
    that the certificate is checked for that name."""
    return await client.get(
        base + path,
        headers={"Host": host, **(headers or {})},
        extensions={"sni_hostname": host} if base.startswith("https") else None,
    )


@pytest.fixture
async def client(pki: Pki) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(pki.ca))) as client:
        yield client


async def _ready(harness: Harness, name: str, project: str = "main", **config: object) -> None:
    run_id = add_service(harness.store, name, project=project, run_id=f"run-{project}-{name}", **config)
    replica = await harness.replica(f"{project}-{name}")
    add_replica(harness.store, run_id, f"r-{project}-{name}-0", replica.url)


async def test_a_service_on_its_host_over_tls_gets_its_own_path(
    harness: Harness, proxy: Proxy, client: httpx.AsyncClient
) -> None:
    await _ready(harness, "web")

    async def served() -> bool:
        response = await _get(client, proxy.secure, f"web.{DOMAIN}", "/v1/items?x=1", bearer())
        return response.status_code == 200

    await eventually(served)
    response = await _get(client, proxy.secure, f"web.{DOMAIN}", "/v1/items?x=1", bearer())
    seen = response.json()
    assert (seen["replica"], seen["path"]) == ("main-web", "/v1/items?x=1")
    assert seen["headers"]["X-Forwarded-Proto"] == "https"
    assert seen["headers"]["X-Forwarded-Host"] == f"web.{DOMAIN}"
    # The path form still works over TLS, and `auth` is checked on the host form as on it.
    response = await _get(client, proxy.secure, f"web.{DOMAIN}", "/v1/items")
    assert response.status_code == 401
    response = await client.get(
        proxy.secure + "/proxy/services/main/web/x",
        extensions={"sni_hostname": f"proxy.{DOMAIN}"},
        headers=bearer(),
    )
    seen = response.json()  # on the fast path, which reads the heads the TLS transport decrypts
    assert (seen["path"], seen["headers"]["X-Forwarded-Proto"]) == ("/x", "https")


async def test_another_project_by_its_label_and_a_per_host_certificate(
    harness: Harness, proxy: Proxy, client: httpx.AsyncClient
) -> None:
    await _ready(harness, "web", project="other", auth=False)

    async def served() -> bool:
        return (await _get(client, proxy.secure, f"web.other.{DOMAIN}", "/a")).status_code == 200

    await eventually(served)  # *.example.test does not cover it: its own certificate, chosen by SNI
    assert (await _get(client, proxy.secure, f"web.other.{DOMAIN}", "/a")).json()["replica"] == "other-web"


async def test_a_wrong_host_under_the_domain_is_a_clear_404(proxy: Proxy, client: httpx.AsyncClient) -> None:
    response = await _get(client, proxy.secure, f"nothing.{DOMAIN}", "/x")
    assert response.status_code == 404
    assert "no running service main/nothing" in response.text
    response = await _get(client, proxy.plain, f"a.b.c.{DOMAIN}", "/x")  # no certificate names it
    assert response.status_code == 404
    assert f"<run>.{DOMAIN}" in response.text


async def test_the_models_host(harness: Harness, proxy: Proxy, client: httpx.AsyncClient) -> None:
    await _ready(harness, "llm", auth=False, model="acme/llm-1")

    async def listed() -> bool:
        response = await _get(client, proxy.secure, f"gateway.{DOMAIN}", "/v1/models")
        return response.status_code == 200 and bool(response.json()["data"])

    await eventually(listed)
    response = await _get(client, proxy.secure, f"gateway.{DOMAIN}", "/v1/models")
    assert [m["id"] for m in response.json()["data"]] == ["acme/llm-1"]
    response = await client.post(
        proxy.secure + "/v1/chat/completions",
        headers={"Host": f"gateway.{DOMAIN}"},
        extensions={"sni_hostname": f"gateway.{DOMAIN}"},
        content=json.dumps({"model": "acme/llm-1", "messages": []}),
    )
    assert response.json()["path"] == "/v1/chat/completions"
    response = await _get(client, proxy.secure, f"gateway.{DOMAIN}", "/elsewhere")
    assert response.status_code == 404


async def test_plain_http_keeps_its_paths_and_serves_the_hosts(
    harness: Harness, proxy: Proxy, client: httpx.AsyncClient
) -> None:
    # `https: false`: http://<run>.<domain>/ on the plain listener (docs/services.md#https).
    await _ready(harness, "plain", auth=False, https=False)

    async def served() -> bool:
        return (await client.get(proxy.plain + "/proxy/services/main/plain/p")).status_code == 200

    await eventually(served)
    assert (await client.get(proxy.plain + "/proxy/services/main/plain/p")).json()["path"] == "/p"
    seen = (await _get(client, proxy.plain, f"plain.{DOMAIN}:80", "/p")).json()
    assert (seen["path"], seen["headers"]["X-Forwarded-Proto"]) == ("/p", "http")
    assert (await client.get(proxy.plain + "/healthz")).text == "ok"
    # A Host outside the domain is routed by its path, as before.
    assert (await _get(client, proxy.plain, "elsewhere.test", "/p")).status_code == 404


async def test_the_certificate_is_checked_by_the_client(pki: Pki, proxy: Proxy) -> None:
    untrusting = httpx.AsyncClient(verify=ssl.create_default_context())
    async with untrusting:
        with pytest.raises(httpx.ConnectError):
            await _get(untrusting, proxy.secure, f"web.{DOMAIN}", "/")


def test_the_options_and_their_variables(pki: Pki) -> None:
    env = {
        "FERRY_HOME": "/tmp/ferry-home",
        "FERRY_GATEWAY_DOMAIN": "Example.Test",
        "FERRY_GATEWAY_TLS_CERT": str(pki.cert),
        "FERRY_GATEWAY_TLS_KEY": str(pki.key),
        "FERRY_GATEWAY_HTTPS_PORT": "8443",
    }
    args = parse_args([], env)
    assert (args.domain, args.tls_cert, args.https_port) == ("example.test", pki.cert, 8443)
    assert tls_context(args) is not None
    args = parse_args(["--domain", DOMAIN], {"FERRY_HOME": "/tmp/ferry-home"})
    assert (args.domain, tls_context(args)) == (DOMAIN, None)  # Host routing on the plain listener alone
    with pytest.raises(SystemExit):
        parse_args(["--tls-cert", str(pki.cert)], {"FERRY_HOME": "/tmp/ferry-home"})
    with pytest.raises(ssl.SSLError):  # a key that is not the certificate's: the proxy does not start
        server_context(pki.cert, pki.certs_dir / f"web.other.{DOMAIN}.key")
