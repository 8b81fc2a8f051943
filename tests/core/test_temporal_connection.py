"""The Temporal connection settings (core/temporal_connection.py, docs/deployment.md): Temporal's CLI
names and the earlier ones, TLS implied by a key or a PEM, and every disagreement a one-line error."""

from __future__ import annotations

import base64

import pytest

from core.settings import Settings
from core.temporal_connection import (
    SECURITY_VARIABLES,
    ConnectionSettingsError,
    PemSource,
    TemporalConnection,
    TLSSettings,
    check_pem,
    security_variables,
    temporal_connection,
    tls_problem,
    without_security,
)

ADDRESS = "temporal.example:7233"


def connection(**variables: str) -> TemporalConnection:
    return temporal_connection(variables, ADDRESS, "default")


def refusal(variables: dict[str, str], *, embedded: bool = False) -> str:
    with pytest.raises(ConnectionSettingsError) as raised:
        temporal_connection(variables, ADDRESS, "default", embedded=embedded)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_nothing_set_is_plain_tcp() -> None:
    assert connection() == TemporalConnection(ADDRESS, "default", None, None)
    assert connection(TEMPORAL_TLS="false") == TemporalConnection(ADDRESS)


def test_tls_on_by_flag_with_the_system_roots() -> None:
    for value in ("true", "1", "TRUE", "yes", "on"):
        assert connection(TEMPORAL_TLS=value).tls == TLSSettings()
    assert "TEMPORAL_TLS: expected true or false, not 'maybe'" in refusal({"TEMPORAL_TLS": "maybe"})


def test_an_api_key_implies_tls_unless_tls_is_off() -> None:
    keyed = connection(TEMPORAL_API_KEY="k-1")
    assert keyed.api_key == "k-1" and keyed.tls == TLSSettings()
    plain = connection(TEMPORAL_API_KEY="k-1", TEMPORAL_TLS="false")
    assert plain.api_key == "k-1" and plain.tls is None
    assert connection(TEMPORAL_API_KEY="  ").api_key is None


def test_any_pem_implies_tls_by_the_cli_names_and_the_earlier_ones() -> None:
    current = connection(
        TEMPORAL_TLS_SERVER_CA_CERT_PATH="/ca.pem",
        TEMPORAL_TLS_CLIENT_CERT_PATH="/c.pem",
        TEMPORAL_TLS_CLIENT_KEY_PATH="/k.pem",
        TEMPORAL_TLS_SERVER_NAME="temporal.internal",
    )
    assert current.tls == TLSSettings(
        server_ca=PemSource("TEMPORAL_TLS_SERVER_CA_CERT_PATH", path="/ca.pem"),
        client_cert=PemSource("TEMPORAL_TLS_CLIENT_CERT_PATH", path="/c.pem"),
        client_key=PemSource("TEMPORAL_TLS_CLIENT_KEY_PATH", path="/k.pem"),
        server_name="temporal.internal",
    )
    earlier = connection(TEMPORAL_TLS_CA="/ca.pem", TEMPORAL_TLS_CERT="/c.pem", TEMPORAL_TLS_KEY="/k.pem")
    assert earlier.tls is not None and earlier.tls.client_key == PemSource("TEMPORAL_TLS_KEY", path="/k.pem")
    assert earlier.tls.server_ca == PemSource("TEMPORAL_TLS_CA", path="/ca.pem")
    by_value = connection(TEMPORAL_TLS_CLIENT_CERT_DATA="CERT", TEMPORAL_TLS_KEY_DATA="KEY")
    assert by_value.tls is not None
    assert by_value.tls.client_cert == PemSource("TEMPORAL_TLS_CLIENT_CERT_DATA", data="CERT")
    assert by_value.tls.client_key == PemSource("TEMPORAL_TLS_KEY_DATA", data="KEY")
    assert connection(TEMPORAL_TLS_SERVER_NAME="n").tls == TLSSettings(server_name="n")


def test_both_names_of_one_setting_agree_or_are_refused() -> None:
    same = connection(TEMPORAL_TLS_CA="/ca.pem", TEMPORAL_TLS_SERVER_CA_CERT_PATH="/ca.pem")
    assert same.tls is not None and same.tls.server_ca is not None
    message = refusal(
        {"TEMPORAL_TLS_CERT": "/a", "TEMPORAL_TLS_CLIENT_CERT_PATH": "/b", "TEMPORAL_TLS_KEY": "/k"}
    )
    assert message == "TEMPORAL_TLS_CLIENT_CERT_PATH or TEMPORAL_TLS_CERT differ: set one of them"


def test_a_file_and_its_text_are_refused_together() -> None:
    message = refusal({"TEMPORAL_TLS_CA": "/ca.pem", "TEMPORAL_TLS_SERVER_CA_CERT_DATA": "PEM"})
    assert (
        message
        == "TEMPORAL_TLS_CA and TEMPORAL_TLS_SERVER_CA_CERT_DATA are both set: a file or its text, not both"
    )


def test_a_key_without_a_certificate_and_the_reverse() -> None:
    assert refusal({"TEMPORAL_TLS_KEY": "/k.pem"}) == (
        "TEMPORAL_TLS_KEY is set without a client certificate "
        "(TEMPORAL_TLS_CLIENT_CERT_PATH or TEMPORAL_TLS_CERT): mTLS needs both"
    )
    assert refusal({"TEMPORAL_TLS_CLIENT_CERT_DATA": "PEM"}).startswith(
        "TEMPORAL_TLS_CLIENT_CERT_DATA is set without a client key (TEMPORAL_TLS_CLIENT_KEY_PATH or"
    )


def test_tls_off_with_tls_settings_is_refused() -> None:
    message = refusal({"TEMPORAL_TLS": "false", "TEMPORAL_TLS_CA": "/ca.pem"})
    assert message == "TEMPORAL_TLS is false but TEMPORAL_TLS_CA is set: unset one of them"


def test_disabling_host_verification_is_refused_with_the_way_around() -> None:
    assert connection(TEMPORAL_TLS_DISABLE_HOST_VERIFICATION="false").tls is None
    message = refusal({"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true"})
    assert "not supported" in message and "TEMPORAL_TLS_SERVER_NAME" in message


def test_the_embedded_stack_takes_no_tls_and_no_key() -> None:
    assert (
        temporal_connection({"TEMPORAL_TLS": "false"}, "127.0.0.1:7233", "default", embedded=True).tls is None
    )
    assert refusal({"TEMPORAL_API_KEY": "k"}, embedded=True).startswith(
        "TEMPORAL_API_KEY is set but no Temporal address is (FERRY_TEMPORAL_ADDRESS or TEMPORAL_ADDRESS)"
    )
    assert refusal({"TEMPORAL_TLS": "1"}, embedded=True).startswith("TLS is set but no Temporal address is")


def test_settings_read_ferrys_names_first_then_temporals() -> None:
    ferry = Settings.from_env(
        {"FERRY_TEMPORAL_ADDRESS": "a:1", "TEMPORAL_ADDRESS": "b:2", "FERRY_HOME": "/h"}
    )
    assert ferry.temporal_address == "a:1"
    temporal = Settings.from_env({"TEMPORAL_ADDRESS": "b:2", "TEMPORAL_NAMESPACE": "ns", "FERRY_HOME": "/h"})
    assert (temporal.temporal_address, temporal.temporal_namespace) == ("b:2", "ns")
    both = Settings.from_env({"FERRY_TEMPORAL_NAMESPACE": "f", "TEMPORAL_NAMESPACE": "t", "FERRY_HOME": "/h"})
    assert both.temporal_namespace == "f" and both.temporal_address is None


def test_settings_check_the_security_variables_only_when_connecting() -> None:
    env = {"FERRY_HOME": "/h", "TEMPORAL_ADDRESS": "b:2", "TEMPORAL_TLS": "maybe", "UNRELATED": "x"}
    settings = Settings.from_env(env)  # commands that need no server never fail on them
    assert settings.temporal_security == {"TEMPORAL_TLS": "maybe"}
    with pytest.raises(ConnectionSettingsError, match="TEMPORAL_TLS: expected true or false"):
        settings.temporal_connection()
    keyed = Settings.from_env({"FERRY_HOME": "/h", "TEMPORAL_API_KEY": "k"})
    with pytest.raises(ConnectionSettingsError, match="no Temporal address is"):
        keyed.temporal_connection("127.0.0.1:7233")
    plain = Settings.from_env({"FERRY_HOME": "/h"}).temporal_connection("127.0.0.1:7233")
    assert plain == TemporalConnection("127.0.0.1:7233")
    with pytest.raises(ConnectionSettingsError, match="no Temporal address: set FERRY_TEMPORAL_ADDRESS"):
        Settings.from_env({"FERRY_HOME": "/h"}).temporal_connection()


def test_the_embedded_stacks_environment_loses_the_security_variables() -> None:
    env = {name: "x" for name in SECURITY_VARIABLES} | {"TEMPORAL_ADDRESS": "a:1", "PATH": "/bin"}
    assert without_security(env) == {"TEMPORAL_ADDRESS": "a:1", "PATH": "/bin"}
    assert security_variables({"TEMPORAL_API_KEY": "", "TEMPORAL_TLS_CA": "/ca"}) == {
        "TEMPORAL_TLS_CA": "/ca"
    }


def pem(label: str, body: bytes = b"\x30\x03\x02\x01\x01") -> bytes:
    return f"-----BEGIN {label}-----\n{base64.b64encode(body).decode()}\n-----END {label}-----\n".encode()


SOURCE = PemSource("TEMPORAL_TLS_CERT", path="/etc/c.pem")


def test_pem_certificates_and_chains_pass() -> None:
    chain = pem("CERTIFICATE") + pem("CERTIFICATE")
    assert check_pem(SOURCE, chain, "certificate") == chain
    for label in ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"):
        assert check_pem(SOURCE, pem(label), "private key") == pem(label)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe not ascii",
        b"just text",
        pem("PRIVATE KEY"),  # a key where a certificate should be
        b"-----BEGIN CERTIFICATE-----\n!!notbase64!!\n-----END CERTIFICATE-----\n",
        b"-----BEGIN CERTIFICATE-----\nMAMCAQE=\n",  # cut short
    ],
)
def test_what_is_not_a_pem_certificate_is_named(content: bytes) -> None:
    with pytest.raises(ConnectionSettingsError) as raised:
        check_pem(SOURCE, content, "certificate")
    assert str(raised.value) == "TEMPORAL_TLS_CERT: /etc/c.pem does not hold a PEM certificate"


def test_keys_that_the_sdk_cannot_use_are_named() -> None:
    by_value = PemSource("TEMPORAL_TLS_CLIENT_KEY_DATA", data="...")
    with pytest.raises(ConnectionSettingsError, match="its value does not hold one PEM private key"):
        check_pem(by_value, pem("CERTIFICATE"), "private key")
    with pytest.raises(ConnectionSettingsError, match="does not hold one PEM private key"):
        check_pem(by_value, pem("PRIVATE KEY") + pem("PRIVATE KEY"), "private key")
    with pytest.raises(ConnectionSettingsError, match="an encrypted private key"):
        check_pem(by_value, pem("ENCRYPTED PRIVATE KEY"), "private key")


# The SDK's errors as it gave them against tests/e2e/tls_relay.py.
CONNECT = "Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError("
UNKNOWN_ISSUER = CONNECT + "Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }))"
OTHER_NAME = (
    CONNECT
    + 'Custom { kind: InvalidData, error: InvalidCertificate(NotValidForNameContext { expected: DnsName("'
    'other.test"), presented: ["DnsName(\\"localhost\\")", "IpAddress(127.0.0.1)"] }) }))'
)
PLAIN_SERVER = CONNECT + "Custom { kind: InvalidData, error: InvalidMessage(InvalidContentType) }))"
NO_CLIENT_CERTIFICATE = (
    "Failed client connect: `get_system_info` call error after connection: Status { code: Cancelled, "
    'message: "operation was canceled", source: Some(tonic::transport::Error(Transport, '
    'hyper::Error(Canceled, "connection closed"))) }'
)
REFUSED = CONNECT + 'ConnectError("tcp connect error", Os { code: 111, message: "Connection refused" })))'


def test_tls_problems_name_the_setting_to_look_at() -> None:
    assert tls_problem(UNKNOWN_ISSUER) == (
        "its certificate is signed by no CA this client trusts "
        "(TEMPORAL_TLS_SERVER_CA_CERT_PATH names the CA)"
    )
    assert tls_problem(OTHER_NAME) == (
        "its certificate is not for this name (TEMPORAL_TLS_SERVER_NAME names the one it carries)"
    )
    assert tls_problem(CONNECT + "InvalidCertificate(BadSignature) }))") == (
        "its certificate is refused (BadSignature)"
    )
    assert tls_problem(PLAIN_SERVER) == (
        "it does not answer in TLS (is TLS on there? TEMPORAL_TLS=false turns it off here)"
    )
    assert (
        tls_problem("received fatal alert: HandshakeFailure")
        == "it refused the TLS handshake (HandshakeFailure)"
    )
    assert tls_problem("error: AlertReceived(CertificateRequired) }") == (
        "it wants a client certificate (TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH)"
    )
    closed = tls_problem(NO_CLIENT_CERTIFICATE)
    assert closed is not None and "TEMPORAL_TLS_CLIENT_CERT_PATH" in closed
    eof = (
        CONNECT
        + 'Custom { kind: UnexpectedEof, error: "peer closed connection without sending TLS close_notify" }'
    )
    reset = 'Status { message: "transport error", source: Some(hyper::Error(Io, Kind(ConnectionReset))) }'
    for also_closed in (
        eof,
        reset,
        'Custom { kind: BrokenPipe, error: "stream closed because of a broken pipe" }',
    ):
        assert tls_problem(also_closed) == closed
    assert tls_problem(REFUSED) is None


def test_connect_problem_is_one_line_of_at_most_a_few_words() -> None:
    from cli.errors import connect_problem

    for message in (UNKNOWN_ISSUER, OTHER_NAME, PLAIN_SERVER, NO_CLIENT_CERTIFICATE, REFUSED + "\n  more"):
        problem = connect_problem("h:1", message)
        assert problem.startswith("cannot reach the Temporal server at h:1: ") and "\n" not in problem
        assert "tonic" not in problem and len(problem) < 250
    assert connect_problem("h:1", REFUSED) == "cannot reach the Temporal server at h:1: Connection refused"
