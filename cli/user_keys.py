"""The user's SSH key pair (docs/attach.md): made on first use in FERRY_HOME/ssh, as dstack keeps
~/.dstack/ssh/id_rsa. Its public half is installed for each job the user submits (RunInput's
`authorized_keys`); `ferry attach` and the user's own `ssh`, `scp` and VS Code log in with the private half.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from embedded.processes import private_opener

KEY_FILE = Path("ssh") / "id_ed25519"


def user_key(home: Path) -> Path:
    """The private key's path; the pair is made if there is none yet (under a lock: two `ferry` commands
    started at once make one pair)."""
    private = home / KEY_FILE
    public = private.with_suffix(".pub")
    if private.exists() and public.exists():
        return private
    private.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(private.parent, 0o700)
    with open(private.parent / ".lock", "w", opener=private_opener) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (private.exists() and public.exists()):
            import asyncssh  # here: `ferry ps` and the like do not pay for it

            key = asyncssh.generate_private_key("ssh-ed25519", comment=f"ferry@{os.uname().nodename}")
            partial = private.with_name(f".{private.name}.partial")
            key.write_private_key(str(partial))
            os.chmod(partial, 0o600)
            key.write_public_key(str(public))
            os.chmod(public, 0o600)  # FERRY_HOME stays private, this too (embedded/processes.py)
            os.replace(partial, private)  # last: a private key present always has its public half
    return private


def public_key_line(home: Path) -> str:
    """The user's public key, one OpenSSH line (the pair made on first use)."""
    return user_key(home).with_suffix(".pub").read_text().strip()
