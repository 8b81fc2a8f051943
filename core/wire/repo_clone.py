"""One of a job's `repos` by `url`, as its agent clones it (docs/runs.md#repos): part of the job spec.

`place` is where it goes, named as the code archive names a `files` destination (core.files_manifest
placed_at). `token` and `ssh_key` are its credentials (docs/runs.md#private-repos): filled in by START_JOB
from the project's sealed secrets, never in Temporal's history; the agent keeps them in memory only
(agent/secret_memory.py) and writes "" in their place.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.files_manifest import placed_at


class RepoClone(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0, description="its place in the configuration's `repos`, for messages")
    url: str = Field(min_length=1, pattern=r"^[^-\s][^\s]*$")
    branch: str | None = Field(default=None, min_length=1, pattern=r"^[^-\s][^\s]*$")
    hash: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{4,64}$")
    place: str = Field(min_length=1, description="where it goes, as the code archive names it")
    if_exists: Literal["error", "skip"] = "error"
    single_branch: bool = False
    token: str | None = Field(default=None, description="an HTTPS token; None: none (filled in late)")
    ssh_key: str | None = Field(default=None, description="an SSH private key; None: none")

    @field_validator("place")
    @classmethod
    def _placeable(cls, value: str) -> str:
        placed_at(value)  # ValueError for a place the archive's rules do not make
        return value

    def credentials(self) -> list[str]:
        return [value for value in (self.token, self.ssh_key) if value]
