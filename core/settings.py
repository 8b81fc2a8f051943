"""Where Ferry keeps its state and how it reaches Temporal, from FERRY_* environment variables."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

TASK_QUEUE = "ferry"
DEFAULT_PROJECT = "main"


class Settings(BaseModel):
    home: Path
    database_url: str
    temporal_address: str | None  # None: the embedded stack decides
    temporal_namespace: str

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ) if env is None else env
        home = Path(env.get("FERRY_HOME") or Path.home() / ".ferry").expanduser()
        return cls(
            home=home,
            database_url=env.get("FERRY_DATABASE_URL") or f"sqlite:///{home / 'ferry.db'}",
            temporal_address=env.get("FERRY_TEMPORAL_ADDRESS") or None,
            temporal_namespace=env.get("FERRY_TEMPORAL_NAMESPACE") or "default",
        )
