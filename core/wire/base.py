"""`Message`, the base of every message in core.wire: a value, frozen once made; `Frozen`, a fleet's
(core.fleets) and its placement requests', which also refuses a field it does not know.

Its own module so that every module of core.wire can build on it without importing another's messages.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Message(BaseModel):
    """A message is a value: frozen once made."""

    model_config = ConfigDict(frozen=True)


class Frozen(BaseModel):
    """A fleet's value: frozen once made, and no unknown field."""

    model_config = ConfigDict(extra="forbid", frozen=True)
