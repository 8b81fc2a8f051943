"""Git credentials for private `repos` (docs/runs.md#private-repos): dstack's `dstack init --token` and
`--git-identity`, per repo URL. Ferry keeps them as project secrets (docs/secrets.md) whose names come
from the URL, so that a job names none of them and Temporal's history holds only the URL. Standard library
only."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit

TOKEN_PREFIX = "GIT_TOKEN_"
SSH_KEY_PREFIX = "GIT_SSH_KEY_"
_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>.+)$")  # git@host:org/repo


def repo_key(url: str) -> str:
    """The URL as it identifies a repo: no user or password, no `.git` or trailing `/`, the scheme and host
    lower-case; an `scp`-like `git@host:org/repo` is `ssh://host/org/repo`. Token and key work per repo."""
    if "://" not in url:
        matched = _SCP_LIKE.match(url)
        url = f"ssh://{matched['host']}/{matched['path']}" if matched else url
    parts = urlsplit(url)
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    path = parts.path.rstrip("/").removesuffix(".git").rstrip("/")
    return f"{parts.scheme.lower()}://{host.lower()}{path}"


def _digest(url: str) -> str:
    return hashlib.sha256(repo_key(url).encode()).hexdigest()[:20].upper()


def token_secret(url: str) -> str:
    """The secret holding the HTTPS token of the repo at `url`."""
    return TOKEN_PREFIX + _digest(url)


def ssh_key_secret(url: str) -> str:
    """The secret holding the SSH private key of the repo at `url`."""
    return SSH_KEY_PREFIX + _digest(url)


def without_password(url: str) -> str:
    """`url` with any password it holds (`https://user:TOKEN@host/...`) left out, for messages."""
    parts = urlsplit(url) if "://" in url else None
    if parts is None or parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()
