"""A remote Temporal over TLS, mTLS and with an API key (docs/deployment.md): the real `ferry` CLI and
`ferry worker` reach a real dev server through a TLS-terminating relay (tests/e2e/tls_relay.py; the dev
server has no TLS options), and each setting that cannot work is one line from the CLI."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.exit_codes import UNREACHABLE, USAGE
from embedded.local_agent import free_port, stop_local_agent
from tests.e2e.conftest import FERRY, ROOT, Ferry, ferry_env, last_line, task
from tests.e2e.tls_relay import REJECTION, Certificates, TLSRelay, make_certificates, server_context
from tests.lifecycle.conftest import temporal_address  # noqa: F401 (a fixture, by name)

START_WORKFLOW = "/temporal.api.workflowservice.v1.WorkflowService/StartWorkflowExecution"


@pytest.fixture(scope="module")
def dev_server(temporal_address: str) -> int:  # noqa: F811 (the fixture imported above)
    """The port of the suite's plain dev server (tests/lifecycle/conftest.py)."""
    return int(temporal_address.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("ferry-home")
    yield home
    stop_local_agent(home)  # the worker's


def ferry_at(home: Path, relay: TLSRelay, **variables: str) -> Ferry:
    """`ferry` in `home`, its Temporal the relay's, with these TEMPORAL_* variables."""
    env = ferry_env(home) | {"FERRY_TEMPORAL_ADDRESS": f"127.0.0.1:{relay.port}"} | variables
    return Ferry(home, env)


def one_line_error(result: subprocess.CompletedProcess[str], command: str, code: int) -> str:
    """The command's one error line, last on stderr (after `apply`'s plan), and its exit code."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ferry ")]
    assert len(errors) == 1 and errors[0] == last_line(result.stderr), result.stderr
    assert errors[0].startswith(f"ferry {command}: ")
    return errors[0]


def test_tls_a_worker_and_the_cli_run_a_task(dev_server: int, certs: Certificates, home: Path) -> None:
    relay = TLSRelay(dev_server, server_context(certs))
    config = task(home, "over-tls", "echo ran-over-tls")
    with relay.running():
        trusted = ferry_at(home, relay, TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(certs.ca))
        log = (home / "worker.log").open("w")
        worker = subprocess.Popen([*FERRY, "worker"], cwd=ROOT, env=trusted.env, stdout=log, stderr=log)
        try:
            applied = trusted("apply", "-y", "-f", config, timeout=120)
            assert applied.returncode == 0, (applied.stderr, (home / "worker.log").read_text())
            assert "ran-over-tls" in applied.stdout
            assert "run over-tls: done" in applied.stderr
        finally:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0, (home / "worker.log").read_text()
            log.close()
        # The worker's calls and the CLI's went through the relay: its TLS connections, no other way in.
        assert relay.handshakes >= 2 and START_WORKFLOW in {method for method, _ in relay.requests}

        untrusting = ferry_at(home, relay, TEMPORAL_TLS="true")  # the system's roots: not the test's CA
        line = one_line_error(
            untrusting("apply", "-y", "-d", "-f", config, "-n", "untrusted"), "apply", UNREACHABLE
        )
        assert line == (
            f"ferry apply: cannot reach the Temporal server at 127.0.0.1:{relay.port}: its certificate is "
            "signed by no CA this client trusts (TEMPORAL_TLS_SERVER_CA_CERT_PATH names the CA)"
        )
        other_name = ferry_at(
            home, relay, TEMPORAL_TLS_CA=str(certs.ca), TEMPORAL_TLS_SERVER_NAME="other.test"
        )
        line = one_line_error(
            other_name("apply", "-y", "-d", "-f", config, "-n", "renamed"), "apply", UNREACHABLE
        )
        assert line.endswith(
            ": its certificate is not for this name (TEMPORAL_TLS_SERVER_NAME names the one it carries)"
        )
        other_ca = ferry_at(home, relay, TEMPORAL_TLS_CA=str(certs.other_ca))
        line = one_line_error(other_ca("worker"), "worker", UNREACHABLE)
        assert "its certificate is signed by no CA this client trusts" in line
        plain = ferry_at(home, relay)  # no TLS at all: the relay's TLS handshake gets plain HTTP/2
        line = one_line_error(plain("apply", "-y", "-d", "-f", config, "-n", "plain"), "apply", UNREACHABLE)
        assert "it closed the connection (does it want TLS, TEMPORAL_TLS=true" in line


def test_mtls_with_the_client_certificate_and_without(
    dev_server: int, certs: Certificates, home: Path
) -> None:
    relay = TLSRelay(dev_server, server_context(certs, client_certificates=True))
    config = task(home, "over-mtls", "true")
    with relay.running():
        by_files = ferry_at(
            home,
            relay,
            TEMPORAL_TLS_CA=str(certs.ca),
            TEMPORAL_TLS_CERT=str(
                certs.client_cert
            ),  # the names the issue gives, Temporal's CLI's before 1.4
            TEMPORAL_TLS_KEY=str(certs.client_key),
        )
        submitted = by_files("apply", "-y", "-d", "-f", config, "-n", "mtls-files")
        assert submitted.returncode == 0, submitted.stderr
        assert "run mtls-files submitted" in submitted.stdout + submitted.stderr
        by_value = ferry_at(
            home,
            relay,
            TEMPORAL_TLS_SERVER_CA_CERT_DATA=certs.ca.read_text(),  # Temporal's CLI's names, PEM by value
            TEMPORAL_TLS_CLIENT_CERT_DATA=certs.client_cert.read_text(),
            TEMPORAL_TLS_CLIENT_KEY_DATA=certs.client_key.read_text(),
        )
        submitted = by_value("apply", "-y", "-d", "-f", config, "-n", "mtls-data")
        assert submitted.returncode == 0, submitted.stderr

        no_certificate = ferry_at(home, relay, TEMPORAL_TLS_CA=str(certs.ca))
        line = one_line_error(
            no_certificate("apply", "-y", "-d", "-f", config, "-n", "mtls-none"), "apply", UNREACHABLE
        )
        assert line.startswith(f"ferry apply: cannot reach the Temporal server at 127.0.0.1:{relay.port}: ")
        assert "TEMPORAL_TLS_CLIENT_CERT_PATH" in line


def test_an_api_key_reaches_the_server_on_every_call(
    dev_server: int, certs: Certificates, home: Path
) -> None:
    relay = TLSRelay(dev_server, server_context(certs), api_key="key-of-ferry")
    config = task(home, "with-key", "true")
    with relay.running():
        # TLS because of the key (TEMPORAL_TLS unset), as Temporal Cloud expects.
        keyed = ferry_at(home, relay, TEMPORAL_API_KEY="key-of-ferry", TEMPORAL_TLS_CA=str(certs.ca))
        submitted = keyed("apply", "-y", "-d", "-f", config, "-n", "keyed")
        assert submitted.returncode == 0, submitted.stderr
        methods = {method for method, _ in relay.requests}
        assert START_WORKFLOW in methods and len(relay.requests) >= 2
        assert {authorization for _, authorization in relay.requests} == {"Bearer key-of-ferry"}

        for wrong in ({"TEMPORAL_API_KEY": "another-key"}, {}):
            refused = ferry_at(home, relay, TEMPORAL_TLS_CA=str(certs.ca), **wrong)
            line = one_line_error(
                refused("apply", "-y", "-d", "-f", config, "-n", "unkeyed"), "apply", UNREACHABLE
            )
            assert (
                line
                == f"ferry apply: cannot reach the Temporal server at 127.0.0.1:{relay.port}: {REJECTION}"
            )
        assert [authorization for _, authorization in relay.requests[-2:]] == ["Bearer another-key", None]


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"TEMPORAL_TLS_CA": "/no/such/ca.pem"},
            "TEMPORAL_TLS_CA: cannot read /no/such/ca.pem: No such file",
        ),
        ({"TEMPORAL_TLS_KEY": "{key}"}, "TEMPORAL_TLS_KEY is set without a client certificate"),
        (
            {"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "{config}"},
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH: {config} does not hold a",
        ),
        (
            {"TEMPORAL_TLS_CERT": "{key}", "TEMPORAL_TLS_KEY": "{key}"},
            "TEMPORAL_TLS_CERT: {key} does not hold a PEM",
        ),
        ({"TEMPORAL_TLS": "sometimes"}, "TEMPORAL_TLS: expected true or false, not 'sometimes'"),
    ],
)
@pytest.mark.parametrize("command", ["apply", "worker"])
def test_a_bad_setting_is_one_line(
    certs: Certificates, tmp_path: Path, variables: dict[str, str], message: str, command: str
) -> None:
    config = task(tmp_path, "never-sent", "true")
    paths = {"key": str(certs.client_key), "config": config}
    # A port where nothing listens: the settings are refused before any connection is tried.
    env = ferry_env(tmp_path) | {"FERRY_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}
    env |= {name: value.format(**paths) for name, value in variables.items()}
    args = ["apply", "-y", "-d", "-f", config] if command == "apply" else ["worker"]
    line = one_line_error(Ferry(tmp_path, env)(*args), command, USAGE)
    assert line.startswith(f"ferry {command}: {message.format(**paths)}")
    if command == "worker":
        stop_local_agent(tmp_path)
