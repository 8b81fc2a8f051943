"""The proxy's TLS listener's certificates (docs/deployment.md#https-on-a-domain).

One certificate and key (most often a wildcard `*.<domain>` one), and optionally a directory of
per-host ones, `<host>.crt` and `<host>.key`, chosen by the client's SNI: a host with no file of its own
gets the default certificate. ACME issuance is not built (docs/deployment.md: the next step).
"""

from __future__ import annotations

import ssl
from pathlib import Path


def server_context(cert: Path, key: Path, certs_dir: Path | None = None) -> ssl.SSLContext:
    """A server context on `cert`/`key`, with per-host contexts from `certs_dir` by SNI. Raises OSError
    or ssl.SSLError for a file that is missing or not a certificate and key."""
    context = _context(cert, key)
    if certs_dir is None:
        return context
    by_host = {
        path.stem.lower(): _context(path, path.with_suffix(".key"))
        for path in sorted(certs_dir.glob("*.crt"))
    }

    def choose(
        sock: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _default: ssl.SSLContext
    ) -> None:
        chosen = by_host.get((server_name or "").lower())
        if chosen is not None:
            sock.context = chosen

    context.sni_callback = choose
    return context


def _context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context
