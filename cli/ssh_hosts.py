"""Ferry's own SSH config file (docs/attach.md): one `Host <run>` entry per attached run (and `<run>-host`
for an SSH fleet's host it runs on), so that the user's own `ssh <run>`, `scp`, `rsync` and VS Code's
Remote-SSH reach the job through its agent's SSH server. `~/.ssh/config` includes the file once the user
agrees (asked once)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from embedded.processes import private_opener

CONFIG_FILE = Path("ssh") / "config"
KNOWN_HOSTS_FILE = Path("ssh") / "known_hosts"
INCLUDE_ASKED_FILE = Path("ssh") / "include-asked"
ATTACHED_FILE = Path("ssh") / "attached.json"  # per run: the job its entry logs in to, its working dir
_MARK = "# ferry: "  # each entry starts with this line, naming the run it is for


@dataclass(frozen=True)
class HostEntry:
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


def write_entries(home: Path, run_alias: str, hosts: list[HostEntry], host_keys: dict[str, str]) -> Path:
    """Ferry's SSH config with the run's entries (replacing earlier ones for it) and the agents' host keys
    pinned in Ferry's known_hosts; the config's path."""
    config = home / CONFIG_FILE
    known = home / KNOWN_HOSTS_FILE
    with _locked(home):  # two `ferry attach` at once: both entries kept
        kept = _without(config.read_text() if config.exists() else "", run_alias)
        entry = _MARK + run_alias + "\n" + "".join(h.render(known) for h in hosts)
        _write(config, kept + entry)
        lines = known.read_text().splitlines() if known.exists() else []
        pinned = {alias for alias in host_keys}
        lines = [line for line in lines if line.split(" ", 1)[0] not in pinned]
        lines += [f"{alias} {' '.join(key.split()[:2])}" for alias, key in sorted(host_keys.items())]
        _write(known, "\n".join(lines) + "\n")
    return config


def note_attached(home: Path, run_alias: str, user: str, working_dir: str) -> None:
    """Remember that `Host <run>` logs in as `user` (a job's task id) landing in `working_dir`: the IDE link
    `ferry ps` shows for that job (docs/attach.md)."""
    with _locked(home):
        attached = _attached(home)
        attached[run_alias] = {"user": user, "working_dir": working_dir}
        _write(home / ATTACHED_FILE, json.dumps(attached, indent=2, sort_keys=True) + "\n")


def attached_jobs(home: Path) -> dict[str, tuple[str, str]]:
    """Per run alias: the task id its entry logs in as, and that job's working directory."""
    return {
        alias: (entry["user"], entry["working_dir"])
        for alias, entry in _attached(home).items()
        if isinstance(entry, dict)
        and isinstance(entry.get("user"), str)
        and isinstance(entry.get("working_dir"), str)
    }


def _attached(home: Path) -> dict[str, object]:
    try:
        attached = json.loads((home / ATTACHED_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return attached if isinstance(attached, dict) else {}


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Ferry's SSH directory (made private), locked against other `ferry` commands writing in it."""
    directory = home / CONFIG_FILE.parent
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    with open(directory / ".lock", "w", opener=private_opener) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


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
