"""The exit codes of every `ferry` command, one meaning each (docs/cli.md#exit-codes).

A script can tell apart what failed (1), what was asked wrongly or can never happen (2), what does not
exist (3) and a server it cannot reach (4) without reading the message.
"""

from __future__ import annotations

OK = 0
# The run failed (`apply` follows a run that ends other than done), `wait` timed out, a fleet's hosts did
# not all deploy, a confirmation was declined, or something went wrong that is none of the below.
FAILED = 1
# A usage error (a bad flag or argument), an invalid configuration, a refusal (a run that is already
# active, a cycle of dependencies, a volume in use), or what can never happen (`wait` for a status of a
# run that has finished another way).
USAGE = 2
# No such run, fleet, volume or secret; `ferry server status` or `upgrade`: the stack is not running.
NOT_FOUND = 3
# The Temporal server cannot be reached, or the embedded stack cannot be started.
UNREACHABLE = 4
# Ferry's API refused the caller: not logged in, a token unknown or revoked (401), or a role that does not
# allow what was asked (403; docs/teams.md#roles).
DENIED = 5
# Ctrl-C: `apply` detached from its run, or a command interrupted (128 + SIGINT).
INTERRUPTED = 130

# name, code, meaning: the table of docs/cli.md#exit-codes, checked by tests/cli/test_cli_contract.py.
TABLE: tuple[tuple[str, int, str], ...] = (
    ("OK", OK, "done: the run ended done, `wait` reached what it waited for"),
    ("FAILED", FAILED, "the run failed, `wait` timed out, a confirmation was declined, an internal error"),
    ("USAGE", USAGE, "a usage error, an invalid configuration, a refusal, what can never happen"),
    (
        "NOT_FOUND",
        NOT_FOUND,
        "no such run, fleet, volume or secret; `server status`, `server upgrade`: not running",
    ),
    ("UNREACHABLE", UNREACHABLE, "the Temporal server cannot be reached, or the embedded stack not started"),
    ("DENIED", DENIED, "not logged in, a token unknown or revoked, or a role that does not allow it"),
    ("INTERRUPTED", INTERRUPTED, "Ctrl-C (`apply` leaves its run running)"),
)
