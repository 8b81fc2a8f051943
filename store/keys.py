"""Ferry's encryption keys and AES-GCM sealing (docs/secrets.md): the store's secrets are sealed with them,
and every Temporal payload too (worker/codec.py).

The keys, first one first (it seals; every one unseals, so that a key can be rotated):

- FERRY_CODEC_KEY: base64 keys of 32 bytes, separated by commas, for a server deployment, where every
  worker, proxy and client must hold the same keys;
- else FERRY_CODEC_KEY_FILE: a file of base64 keys, one per line (`#` comments);
- else FERRY_HOME/codec.key, in that format, made with one new key on first use (mode 0600).

A key is named by its id, a hash of the key that tells nothing of it: what is sealed carries the id of its
key, so that an old key still opens what it sealed once a new one seals.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from core.settings import Settings

ENV_KEYS = "FERRY_CODEC_KEY"
ENV_KEY_FILE = "FERRY_CODEC_KEY_FILE"
HOME_KEY_FILE = "codec.key"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # AES-GCM's standard nonce, random per sealing


class SealError(RuntimeError):
    """The keys cannot be read, or a sealed value cannot be opened with them; the message says why."""


@dataclass(frozen=True)
class Keys:
    """Keys by id, the first one sealing."""

    ids: tuple[str, ...]
    ciphers: Mapping[str, AESGCM]
    _raw: tuple[bytes, ...] = field(repr=False)

    @property
    def current(self) -> str:
        return self.ids[0]

    def seal(self, plaintext: bytes, context: bytes | None = None) -> tuple[str, bytes]:
        """(the sealing key's id, nonce + ciphertext + tag); `context` must be given again to unseal."""
        nonce = os.urandom(NONCE_BYTES)
        return self.current, nonce + self.ciphers[self.current].encrypt(nonce, plaintext, context)

    def unseal(self, key_id: str, sealed: bytes, context: bytes | None = None) -> bytes:
        cipher = self.ciphers.get(key_id)
        if cipher is None:
            raise SealError(
                f"sealed with key {key_id}, which is not among this process's keys ({', '.join(self.ids)}): "
                "see docs/secrets.md, key rotation"
            )
        try:
            return cipher.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], context)
        except InvalidTag:
            raise SealError(f"a value sealed with key {key_id} does not open: it was altered") from None

    def derived(self, purpose: bytes) -> list[str]:
        """A token for `purpose` per key (the sealing key's first): who holds a key can make its token,
        and a token tells nothing of its key (HMAC-SHA256)."""
        return [hmac.new(key, purpose, hashlib.sha256).hexdigest()[:32] for key in self._raw]


def id_of_key(key: bytes) -> str:
    return hashlib.sha256(b"ferry key id\0" + key).hexdigest()[:16]


def keys_of(raw: list[bytes]) -> Keys:
    ids = tuple(id_of_key(key) for key in raw)
    return Keys(ids=ids, ciphers={i: AESGCM(key) for i, key in zip(ids, raw, strict=True)}, _raw=tuple(raw))


def new_key_line() -> str:
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def parse_keys(text: str, source: str) -> list[bytes]:
    """The keys of `text` (base64, separated by commas or lines; `#` starts a comment), in order."""
    words = [
        word.strip()
        for line in text.splitlines()
        for word in line.split("#", 1)[0].split(",")
        if word.strip()
    ]
    if not words:
        raise SealError(f"{source} holds no key")
    keys = []
    for index, word in enumerate(words, start=1):
        try:
            key = base64.b64decode(word, validate=True)
        except (binascii.Error, ValueError):
            raise SealError(f"key {index} of {source} is not base64") from None
        if len(key) != KEY_BYTES:
            raise SealError(f"key {index} of {source} has {len(key)} bytes, not {KEY_BYTES}")
        keys.append(key)
    return keys


def load_keys(env: Mapping[str, str] | None = None) -> Keys:
    """This process's keys, from its environment (see the module's docstring)."""
    env = os.environ if env is None else env
    if ENV_KEYS in env:
        return keys_of(parse_keys(env[ENV_KEYS], ENV_KEYS))
    if env.get(ENV_KEY_FILE):
        path = Path(env[ENV_KEY_FILE]).expanduser()
        try:
            return keys_of(parse_keys(path.read_text(), str(path)))
        except OSError as err:
            raise SealError(f"cannot read {ENV_KEY_FILE} {path}: {err.strerror or err}") from None
    return keys_of(parse_keys(*_home_key_file(Settings.from_env(dict(env)).home)))


_cached: dict[tuple[str | None, ...], Keys] = {}


def process_keys(env: Mapping[str, str] | None = None) -> Keys:
    """load_keys, read once per process for the same settings."""
    env = os.environ if env is None else env
    where = (env.get(ENV_KEYS), env.get(ENV_KEY_FILE), env.get("FERRY_HOME"))
    found = _cached.get(where)
    if found is None:
        found = _cached[where] = load_keys(env)
    return found


def _home_key_file(home: Path) -> tuple[str, str]:
    """FERRY_HOME's key file, made on first use: (its text, its path). Made whole or not at all, by one
    process (a link cannot replace a file), however many start at once."""
    path = home / HOME_KEY_FILE
    with contextlib.suppress(FileNotFoundError):
        return path.read_text(), str(path)
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    made = home / f".{HOME_KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    descriptor = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(f"{new_key_line()}\n")
            out.flush()
            os.fsync(out.fileno())  # on the disk before it is the key: a power loss leaves it whole or absent
        with contextlib.suppress(FileExistsError):  # another process made it first: its key is the key
            os.link(made, path)
    finally:
        made.unlink(missing_ok=True)
    return path.read_text(), str(path)
