"""The keys of the agent's SSH server (agent/ssh_server.py): its host key, and the keys a task lets in.

The host key is made once per data dir and kept there (mode 0600), so that a client that has seen this
agent's key once recognizes it after an agent restart. A task's authorized keys come with its submission
(`TaskSubmitRequest.authorized_keys`), as OpenSSH public key lines (`ssh-ed25519 AAAA... comment`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import asyncssh

HOST_KEY_NAME = "ssh_host_ed25519_key"
HOST_KEY_ALGORITHM = "ssh-ed25519"


class BadAuthorizedKey(ValueError):
    pass


def parse_authorized_key(line: str) -> asyncssh.SSHKey:
    """One OpenSSH public key line as a key; BadAuthorizedKey, saying why, when it is not one."""
    # import_public_key also takes multi-line formats (RFC 4716, PEM): a line is what the API promises.
    if "\n" in line.strip() or "\r" in line or "\x00" in line:
        raise BadAuthorizedKey("an authorized key must be one OpenSSH public key line")
    try:
        return asyncssh.import_public_key(line.strip())
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise BadAuthorizedKey(f"not an OpenSSH public key line ({exc}): {line[:60]!r}") from exc


def check_authorized_keys(lines: Iterable[str]) -> None:
    """Refuse the first line that is not a public key (BadAuthorizedKey)."""
    for line in lines:
        parse_authorized_key(line)


def is_authorized(key: asyncssh.SSHKey, lines: Iterable[str]) -> bool:
    """Whether `key` is one of `lines` (compared by key data: comments and formats do not matter)."""
    for line in lines:
        try:
            if parse_authorized_key(line).public_data == key.public_data:
                return True
        except BadAuthorizedKey:
            continue  # checked at submission; a record edited by hand lets in nobody with it
    return False


def load_or_create_host_key(data_dir: Path) -> asyncssh.SSHKey:
    """The agent's host key: read from the data dir, or made and written there the first time."""
    path = data_dir / HOST_KEY_NAME
    if path.exists():
        return asyncssh.read_private_key(str(path))
    key = asyncssh.generate_private_key(HOST_KEY_ALGORITHM)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, key.export_private_key())
    finally:
        os.close(fd)
    os.replace(tmp, path)  # renamed into place: a crash never leaves half a key to be read next time
    return key


def public_line(key: asyncssh.SSHKey) -> str:
    """The OpenSSH public key line of `key`, without a comment (`ssh-ed25519 AAAA...`)."""
    return " ".join(key.export_public_key("openssh").decode().split()[:2])
