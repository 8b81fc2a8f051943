"""`Message`, the base of every message in core.wire: a value, frozen once made.

Its own module so that every module of core.wire can build on it without importing another's messages.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Message(BaseModel):
    """A message is a value: frozen once made."""

    model_config = ConfigDict(frozen=True)
