"""How Ferry reaches a Temporal server: its address and namespace, TLS, mTLS and an API key, from
environment variables named as Temporal's own CLI names them (docs/deployment.md#variables).

Pure: what the variables say and whether they agree, and whether a PEM text is what it should be.
worker/temporal.py reads the files and connects.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# Ferry's own names first; Temporal's CLI names are read when Ferry's are unset.
ADDRESS_VARIABLES = ("FERRY_TEMPORAL_ADDRESS", "TEMPORAL_ADDRESS")
NAMESPACE_VARIABLES = ("FERRY_TEMPORAL_NAMESPACE", "TEMPORAL_NAMESPACE")
DEFAULT_NAMESPACE = "default"

API_KEY = "TEMPORAL_API_KEY"
TLS = "TEMPORAL_TLS"
SERVER_NAME = "TEMPORAL_TLS_SERVER_NAME"
DISABLE_HOST_VERIFICATION = "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"
# Each PEM by path or by value: Temporal's current name first, then the one its CLI had before its
# environment configuration (TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY, TEMPORAL_TLS_CA, ..._DATA).
SERVER_CA_PATH = ("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_CA")
SERVER_CA_DATA = ("TEMPORAL_TLS_SERVER_CA_CERT_DATA", "TEMPORAL_TLS_CA_DATA")
CLIENT_CERT_PATH = ("TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CERT")
CLIENT_CERT_DATA = ("TEMPORAL_TLS_CLIENT_CERT_DATA", "TEMPORAL_TLS_CERT_DATA")
CLIENT_KEY_PATH = ("TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_KEY")
CLIENT_KEY_DATA = ("TEMPORAL_TLS_CLIENT_KEY_DATA", "TEMPORAL_TLS_KEY_DATA")

# Everything but the address and namespace: what the embedded stack's processes never inherit.
SECURITY_VARIABLES = (
    API_KEY,
    TLS,
    SERVER_NAME,
    DISABLE_HOST_VERIFICATION,
    *SERVER_CA_PATH,
    *SERVER_CA_DATA,
    *CLIENT_CERT_PATH,
    *CLIENT_CERT_DATA,
    *CLIENT_KEY_PATH,
    *CLIENT_KEY_DATA,
)

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)
# The private keys rustls (the SDK's TLS) reads: PKCS#8, PKCS#1 (RSA) and SEC1 (EC).
_KEY_LABELS = frozenset({"PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"})


class ConnectionSettingsError(Exception):
    """A connection setting that cannot work; the message is one line that names the variable."""


@dataclass(frozen=True)
class PemSource:
    """A PEM file's path or its text, and the variable that gave it (for messages)."""

    variable: str
    path: str | None = None
    data: str | None = None

    @property
    def where(self) -> str:
        return self.path if self.path is not None else "its value"


@dataclass(frozen=True)
class TLSSettings:
    server_ca: PemSource | None = None  # None: the system's roots
    client_cert: PemSource | None = None  # with client_key: mTLS
    client_key: PemSource | None = None
    server_name: str | None = None  # SNI and the name the server's certificate is checked against


@dataclass(frozen=True)
class TemporalConnection:
    address: str
    namespace: str = DEFAULT_NAMESPACE
    tls: TLSSettings | None = None  # None: plain TCP
    api_key: str | None = None


def temporal_address(env: Mapping[str, str]) -> str | None:
    """The configured address; None: the embedded stack's."""
    return _first(env, ADDRESS_VARIABLES)


def temporal_namespace(env: Mapping[str, str]) -> str:
    return _first(env, NAMESPACE_VARIABLES) or DEFAULT_NAMESPACE


def security_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The TLS and API key variables that are set (an empty one counts as unset)."""
    return {name: env[name] for name in SECURITY_VARIABLES if env.get(name, "").strip()}


def without_security(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less the TLS and API key variables: the embedded stack is plain TCP on loopback."""
    return {name: value for name, value in env.items() if name not in SECURITY_VARIABLES}


def temporal_connection(
    variables: Mapping[str, str], address: str, namespace: str, *, embedded: bool = False
) -> TemporalConnection:
    """How to reach the server at `address`, as `variables` say; ConnectionSettingsError if they
    disagree. An API key implies TLS unless TEMPORAL_TLS is false (Temporal Cloud takes keys over TLS only).
    `embedded`: the address is the embedded stack's, which takes neither TLS nor a key."""
    api_key = (variables.get(API_KEY) or "").strip() or None
    enabled = _flag(variables, TLS)
    if _flag(variables, DISABLE_HOST_VERIFICATION):
        raise ConnectionSettingsError(
            f"{DISABLE_HOST_VERIFICATION} is not supported by Temporal's Python SDK: set {SERVER_NAME} to "
            "a name the server's certificate carries, and the CA that signed it"
        )
    tls = TLSSettings(
        server_ca=_pem_source(variables, SERVER_CA_PATH, SERVER_CA_DATA),
        client_cert=_pem_source(variables, CLIENT_CERT_PATH, CLIENT_CERT_DATA),
        client_key=_pem_source(variables, CLIENT_KEY_PATH, CLIENT_KEY_DATA),
        server_name=(variables.get(SERVER_NAME) or "").strip() or None,
    )
    if (tls.client_cert is None) != (tls.client_key is None):
        given = tls.client_cert or tls.client_key
        missing = (
            ("a client key", CLIENT_KEY_PATH)
            if tls.client_key is None
            else ("a client certificate", CLIENT_CERT_PATH)
        )
        assert given is not None
        raise ConnectionSettingsError(
            f"{given.variable} is set without {missing[0]} ({_either(missing[1])}): mTLS needs both"
        )
    detailed = tls != TLSSettings()
    if enabled is False and detailed:
        named = next(
            name
            for name in SECURITY_VARIABLES
            if name not in (API_KEY, TLS) and variables.get(name, "").strip()
        )
        raise ConnectionSettingsError(f"{TLS} is false but {named} is set: unset one of them")
    use_tls = enabled if enabled is not None else bool(detailed or api_key)
    if embedded and (use_tls or api_key):
        raise ConnectionSettingsError(
            f"{API_KEY if api_key else 'TLS'} is set but no Temporal address is "
            f"({_either(ADDRESS_VARIABLES)}): the embedded stack takes neither TLS nor an API key"
        )
    return TemporalConnection(address, namespace, tls if use_tls else None, api_key)


def check_pem(source: PemSource, content: bytes, kind: Literal["certificate", "private key"]) -> bytes:
    """`content` if it holds a PEM `kind` (a certificate file may hold a chain), else
    ConnectionSettingsError naming the variable."""
    try:
        text = content.decode("ascii")
    except UnicodeDecodeError:
        text = ""
    blocks = _PEM_BLOCK.findall(text)
    if kind == "private key" and any(label == "ENCRYPTED PRIVATE KEY" for label, _ in blocks):
        raise ConnectionSettingsError(
            f"{source.variable}: {source.where}: an encrypted private key; Temporal's SDK needs it "
            "unencrypted (openssl pkey -in KEY -out PLAIN)"
        )
    wanted = [
        body
        for label, body in blocks
        if (label == "CERTIFICATE" if kind == "certificate" else label in _KEY_LABELS)
    ]
    if not wanted or kind == "private key" and len(wanted) > 1 or not all(map(_base64, wanted)):
        some = "one PEM private key" if kind == "private key" else "a PEM certificate"
        raise ConnectionSettingsError(f"{source.variable}: {source.where} does not hold {some}")
    return content


def _base64(body: str) -> bool:
    try:
        return bool(base64.b64decode("".join(body.split()), validate=True))
    except (binascii.Error, ValueError):
        return False


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((value.strip() for name in names if (value := env.get(name, "")).strip()), None)


def _either(names: tuple[str, ...]) -> str:
    return " or ".join(names)


def _flag(variables: Mapping[str, str], name: str) -> bool | None:
    value = variables.get(name, "").strip().lower()
    if not value:
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConnectionSettingsError(f"{name}: expected true or false, not {value!r}")


def _pem_source(
    variables: Mapping[str, str], path_names: tuple[str, ...], data_names: tuple[str, ...]
) -> PemSource | None:
    path, data = _one_of(variables, path_names), _one_of(variables, data_names)
    if path is not None and data is not None:
        raise ConnectionSettingsError(f"{path[0]} and {data[0]} are both set: a file or its text, not both")
    if path is not None:
        return PemSource(path[0], path=path[1])
    if data is not None:
        return PemSource(data[0], data=data[1])
    return None


def _one_of(variables: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, value) of the set variable among `names`, which are one setting's names."""
    given = [(name, variables[name].strip()) for name in names if variables.get(name, "").strip()]
    if len({value for _, value in given}) > 1:
        raise ConnectionSettingsError(f"{_either(tuple(name for name, _ in given))} differ: set one of them")
    return given[0] if given else None


_BAD_CERTIFICATE = re.compile(r"InvalidCertificate\((\w+)")
_ALERT = re.compile(r"(?:received fatal alert|AlertReceived)\W+(\w+)")
# A server that closes the connection at once (TLS 1.3 servers that want a client certificate often do,
# and TLS servers given plain HTTP/2).
_CLIENT_PAIR = f"{CLIENT_CERT_PATH[0]} and {CLIENT_KEY_PATH[0]}"
_CLOSED = ("connection closed", "broken pipe", "UnexpectedEof", "close_notify", "ConnectionReset")
_NOT_FOR_NAME = "its certificate is not for this name (TEMPORAL_TLS_SERVER_NAME names the one it carries)"
_EXPIRED = "its certificate has expired"
_CERTIFICATE_PROBLEMS = {
    "UnknownIssuer": "its certificate is signed by no CA this client trusts "
    "(TEMPORAL_TLS_SERVER_CA_CERT_PATH names the CA)",
    "NotValidForName": _NOT_FOR_NAME,
    "NotValidForNameContext": _NOT_FOR_NAME,
    "Expired": _EXPIRED,
    "ExpiredContext": _EXPIRED,
}


def tls_problem(message: str) -> str | None:
    """What a failed connection's error (the SDK's, from Rust: rustls, tonic, hyper) says of TLS, in words
    that name the setting to look at; None if it says nothing of TLS."""
    if found := _BAD_CERTIFICATE.search(message):
        return _CERTIFICATE_PROBLEMS.get(found.group(1), f"its certificate is refused ({found.group(1)})")
    if "InvalidContentType" in message or "CorruptMessage" in message:
        return "it does not answer in TLS (is TLS on there? TEMPORAL_TLS=false turns it off here)"
    if found := _ALERT.search(message):
        if found.group(1) == "CertificateRequired":
            return f"it wants a client certificate ({_CLIENT_PAIR})"
        return f"it refused the TLS handshake ({found.group(1)})"
    if any(closed in message for closed in _CLOSED):
        return (
            "it closed the connection (does it want TLS, TEMPORAL_TLS=true, "
            f"or a client certificate, {_CLIENT_PAIR}?)"
        )
    return None
