"""What the API's routes take and answer (docs/teams.md#the-api); the CLI reads the same models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from core.teams.roles import GlobalRole, ProjectRole

# A user's or a project's name: what a command line and a URL path carry without quoting.
NAME_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"


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
    name: str = Field(pattern=NAME_PATTERN)
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
    name: str = Field(pattern=NAME_PATTERN)


class MemberInfo(Message):
    user: str
    role: ProjectRole


class MemberRole(Message):
    role: ProjectRole
