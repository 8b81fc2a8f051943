"""A TLS-terminating TCP relay in front of a plain Temporal dev server (which has no TLS options), and the
certificates it and its clients use, made for the test: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate.

The relay reads the HTTP/2 frames both ways. It decodes the client's request headers (HPACK, the `hpack`
package) and records each request's `authorization`; given an API key, it answers a request without that
key as Temporal Cloud does, with gRPC status UNAUTHENTICATED, and closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import hpack
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, CONTINUATION, GOAWAY = 0x1, 0x9, 0x7
END_STREAM, END_HEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20
UNAUTHENTICATED = 16
REJECTION = "relay: bad or missing API key"


@dataclass(frozen=True)
class Certificates:
    """PEM files under one directory."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed none of them


def make_certificates(directory: Path) -> Certificates:
    ca_key, ca = _certificate("ferry test CA", None, None, is_ca=True)
    server_key, server = _certificate("127.0.0.1", ca_key, ca, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    client_key, client = _certificate("ferry client", ca_key, ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    _, other = _certificate("another CA", None, None, is_ca=True)
    files = Certificates(
        *(directory / name for name in ("ca.pem", "s.pem", "s.key", "c.pem", "c.key", "o.pem"))
    )
    for path, made in (
        (files.ca, ca),
        (files.server_cert, server),
        (files.client_cert, client),
        (files.other_ca, other),
    ):
        path.write_bytes(made.public_bytes(serialization.Encoding.PEM))
    for path, key in ((files.server_key, server_key), (files.client_key, client_key)):
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return files


def _certificate(
    name: str,
    issuer_key: ec.EllipticCurvePrivateKey | None,
    issuer: x509.Certificate | None,
    *,
    is_ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if is_ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(issuer_key or key, hashes.SHA256())


def server_context(certs: Certificates, *, client_certificates: bool = False) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.server_cert, certs.server_key)
    context.set_alpn_protocols(["h2"])  # gRPC's HTTP/2, as a real server offers it
    if client_certificates:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certs.ca)
    return context


@dataclass
class TLSRelay:
    """Listens on 127.0.0.1 with TLS and relays to the plain server at `upstream_port`."""

    upstream_port: int
    context: ssl.SSLContext
    api_key: str | None = None  # set: requests without `authorization: Bearer <it>` are refused
    port: int = 0
    # Each request's (gRPC method, authorization header or None), in order.
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    handshakes: int = 0  # TLS handshakes that completed
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)

    @contextlib.contextmanager
    def running(self) -> Iterator[TLSRelay]:
        thread = threading.Thread(target=self._loop.run_forever, name="tls-relay", daemon=True)
        thread.start()
        server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        try:
            yield self
        finally:

            async def close() -> None:
                server.close()
                relays = asyncio.all_tasks() - {asyncio.current_task()}
                for task in relays:
                    task.cancel()
                await asyncio.gather(*relays, return_exceptions=True)

            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            thread.join(10)
            self._loop.close()

    async def _listen(self) -> asyncio.Server:
        server = await asyncio.start_server(self._relay, "127.0.0.1", 0, ssl=self.context)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        refused = asyncio.Event()
        lock = asyncio.Lock()  # frames to the client go whole, the relay's own between the server's
        pumps = [
            asyncio.ensure_future(self._requests(client_reader, server_writer, client_writer, lock, refused)),
            asyncio.ensure_future(self._responses(server_reader, client_writer, lock, refused)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass  # the relay stops
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for writer in (server_writer, client_writer):
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    async def _requests(
        self,
        reader: asyncio.StreamReader,
        upstream: asyncio.StreamWriter,
        client: asyncio.StreamWriter,
        lock: asyncio.Lock,
        refused: asyncio.Event,
    ) -> None:
        decoder = hpack.Decoder()
        preface = await reader.readexactly(len(PREFACE))
        upstream.write(preface)
        blocks: dict[int, bytes] = {}
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                kind, flags, stream, payload = await _frame(reader)
                if kind in (HEADERS, CONTINUATION):
                    blocks[stream] = blocks.get(stream, b"") + _fragment(kind, flags, payload)
                    if flags & END_HEADERS:
                        decoded = decoder.decode(blocks.pop(stream))  # names and values as str
                        headers = {str(name): str(value) for name, value in decoded}
                        authorization = headers.get("authorization")
                        self.requests.append((headers.get(":path", ""), authorization))
                        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
                            refused.set()
                            async with lock:
                                client.write(_refusal(stream))
                                await client.drain()
                            return
                upstream.write(_encode(kind, flags, stream, payload))
                await upstream.drain()

    async def _responses(
        self,
        reader: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        lock: asyncio.Lock,
        refused: asyncio.Event,
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while not refused.is_set():
                frame = _encode(*await _frame(reader))
                async with lock:
                    if refused.is_set():
                        return
                    client.write(frame)
                    await client.drain()


async def _frame(reader: asyncio.StreamReader) -> tuple[int, int, int, bytes]:
    head = await reader.readexactly(9)
    length = int.from_bytes(head[:3], "big")
    kind, flags, stream = head[3], head[4], struct.unpack(">I", head[5:9])[0] & 0x7FFFFFFF
    return kind, flags, stream, await reader.readexactly(length)


def _encode(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _fragment(kind: int, flags: int, payload: bytes) -> bytes:
    """A HEADERS frame's header block fragment, less its padding and priority."""
    if kind != HEADERS:
        return payload
    start, end = 0, len(payload)
    if flags & PADDED:
        start, end = 1, len(payload) - payload[0]
    if flags & PRIORITY:
        start += 5
    return payload[start:end]


def _refusal(stream: int) -> bytes:
    """A trailers-only gRPC answer (UNAUTHENTICATED) on `stream`, then GOAWAY. Literals never indexed, so the
    client's HPACK table stays as the server's frames left it."""
    headers = [
        (":status", "200"),
        ("content-type", "application/grpc"),
        ("grpc-status", str(UNAUTHENTICATED)),
        ("grpc-message", REJECTION),
    ]
    block = hpack.Encoder().encode([hpack.NeverIndexedHeaderTuple(*header) for header in headers])
    goaway = struct.pack(">II", stream, 0)
    return _encode(HEADERS, END_STREAM | END_HEADERS, stream, block) + _encode(GOAWAY, 0, 0, goaway)
