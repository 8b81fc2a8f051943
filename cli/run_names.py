"""A name for a run that `ferry apply` was given none for (neither `name:` nor `-n`): `brave-otter-42`,
as dstack makes them."""

from __future__ import annotations

import secrets

_ADJECTIVES = (
    "brave",
    "calm",
    "eager",
    "fancy",
    "gentle",
    "happy",
    "jolly",
    "kind",
    "lively",
    "proud",
    "quick",
    "silly",
    "swift",
    "witty",
    "bold",
    "bright",
)
_NOUNS = (
    "otter",
    "heron",
    "falcon",
    "badger",
    "lynx",
    "marten",
    "osprey",
    "panda",
    "raven",
    "seal",
    "tapir",
    "walrus",
    "yak",
    "zebra",
    "gecko",
    "koala",
)


def generated_name() -> str:
    return f"{secrets.choice(_ADJECTIVES)}-{secrets.choice(_NOUNS)}-{secrets.randbelow(100)}"
