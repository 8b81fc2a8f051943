"""Ferry's own SSH config file (docs/attach.md): one `Host <run>` entry per attached run (and `<run>-host`
for an SSH fleet's host it runs on), so that the user's own `ssh <run>`, `scp`, `rsync` and VS Code's
Remote-SSH reach the job through its agent's SSH server. `~/.ssh/config` includes the file once the user
agrees (asked once)."""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass
from pathlib import Path

from worker.processes import private_opener

CONFIG_FILE = Path("ssh") / "config"
KNOWN_HOSTS_FILE = Path("ssh") / "known_hosts"
INCLUDE_ASKED_FILE = Path("ssh") / "include-asked"
_MARK = "# ferry: "  # each entry starts with this line, naming the run it is for


@dataclass(frozen=True)
class SSHHost:
    """One `Host` entry."""

    alias: str
    hostname: str
    port: int
    user: str
    identity_file: str | None
    host_key_alias: str | None = None  # the agent's key is pinned under this name in Ferry's known_hosts
    proxy_jump: str | None = None

    def render(self, known_hosts: Path) -> str:
        lines = [
            f"Host {self.alias}",
            f"    HostName {self.hostname}",
            f"    Port {self.port}",
            f"    User {self.user}",
            *(
                [f"    IdentityFile {_quoted(self.identity_file)}", "    IdentitiesOnly yes"]
                if self.identity_file
                else []
            ),
            f"    UserKnownHostsFile {_quoted(str(known_hosts))}",
        ]
        if self.host_key_alias is not None:
            lines += [f"    HostKeyAlias {self.host_key_alias}", "    StrictHostKeyChecking yes"]
        else:  # an SSH fleet's host: the worker reached it by the fleet's settings; its key is learned
            lines.append("    StrictHostKeyChecking accept-new")
        if self.proxy_jump is not None:
            lines.append(f"    ProxyJump {self.proxy_jump}")
        lines.append("    ServerAliveInterval 15")
        return "\n".join(lines) + "\n"


def _quoted(path: str) -> str:
    return f'"{path}"' if " " in path else path


def write_entries(home: Path, run_alias: str, hosts: list[SSHHost], host_keys: dict[str, str]) -> Path:
    """Ferry's SSH config with the run's entries (replacing earlier ones for it) and the agents' host keys
    pinned in Ferry's known_hosts; the config's path."""
    config = home / CONFIG_FILE
    known = home / KNOWN_HOSTS_FILE
    config.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(config.parent, 0o700)
    with open(
        config.parent / ".lock", "w", opener=private_opener
    ) as lock:  # two `ferry attach` at once: both entries kept
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = _without(config.read_text() if config.exists() else "", run_alias)
        entry = _MARK + run_alias + "\n" + "".join(h.render(known) for h in hosts)
        _write(config, kept + entry)
        lines = known.read_text().splitlines() if known.exists() else []
        pinned = {alias for alias in host_keys}
        lines = [line for line in lines if line.split(" ", 1)[0] not in pinned]
        lines += [f"{alias} {' '.join(key.split()[:2])}" for alias, key in sorted(host_keys.items())]
        _write(known, "\n".join(lines) + "\n")
    return config


def _without(text: str, run_alias: str) -> str:
    """The config without the run's entry (from its mark to the next mark)."""
    parts = re.split(r"(?m)^(?=" + re.escape(_MARK) + ")", text)
    return "".join(p for p in parts if p and not p.startswith(_MARK + run_alias + "\n"))


def _write(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.chmod(partial, 0o600)
    os.replace(partial, path)


def include_line(home: Path) -> str:
    return f"Include {home / CONFIG_FILE}"


def user_config_includes(user_config: Path, home: Path) -> bool:
    return user_config.exists() and include_line(home) in user_config.read_text().splitlines()


def add_include(user_config: Path, home: Path) -> None:
    """`Include` of Ferry's file at the top of the user's config (an Include after a `Host` line would
    belong to that host)."""
    user_config.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    current = user_config.read_text() if user_config.exists() else ""
    _write(user_config, include_line(home) + "\n\n" + current)
