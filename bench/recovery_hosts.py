"""What the recovery section's SSH test hosts need (bench.recovery): whether they can be made here, and the
stack worker's settings for them (bench.ferry_side passes these on to the stack it starts)."""

from __future__ import annotations

import os

from testbed.helpers import host_python
from testbed.netns import NamespaceError, preflight


def unavailable() -> str | None:
    """Why the test hosts cannot be made here (not root, no sshd or ip...), or None."""
    try:
        preflight()
    except NamespaceError as err:
        return str(err)
    if not os.access(host_python(), os.X_OK):  # what `python3` is in the hosts' sessions
        return f"no interpreter for the hosts at {host_python()}"
    return None


def ssh_settings() -> dict[str, str]:
    """The stack worker's settings for the test hosts: their host keys are made for the run (accepted
    unchecked: they are reachable from this machine only). Their interpreter is the default `python3`, the
    distribution's, whatever its version (docs/fleets.md#what-a-host-needs)."""
    return {"FERRY_SSH_KNOWN_HOSTS": "none"}
