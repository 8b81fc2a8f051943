"""What the API's routes take and answer (docs/teams.md#the-api); the CLI reads the same models."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from core.teams.roles import GlobalRole, ProjectRole

# A user's or a project's name: what a command line and a URL path carry without quoting.
_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


def _checked_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"invalid name {value!r}: use 1 to 64 lowercase letters, digits, '_', '.' and '-', "
            "starting with a letter"
        )
    return value


Name = Annotated[str, AfterValidator(_checked_name)]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Refusal(Message):
    """Every answer that is not a success: one line, the reason (401, 403, 404, 409, 422)."""

    detail: str


class Me(Message):
    name: str
    role: GlobalRole
    projects: dict[str, ProjectRole]


class UserInfo(Message):
    name: str
    role: GlobalRole
    has_token: bool  # False: revoked
    created_at: float


class NewUser(Message):
    name: Name
    role: GlobalRole = GlobalRole.USER


class RoleChange(Message):
    role: GlobalRole


class IssuedToken(Message):
    """A token, shown this once: the store keeps only its hash."""

    user: str
    token: str


class ProjectInfo(Message):
    name: str
    created_by: str | None
    created_at: float


class NewProject(Message):
    name: Name


class MemberInfo(Message):
    user: str
    role: ProjectRole


class MemberRole(Message):
    role: ProjectRole
