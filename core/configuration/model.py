"""The base of every configuration model, and the error type cross-field checks raise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


class ConfigFieldError(ValueError):
    """A ValueError that names the field it is about, relative to the model that raised it.

    Pydantic reports an error raised by a model validator at the model itself; core.configuration.loading
    reads `path` (pydantic keeps the exception in the error's context) to point at the offending field
    and line.
    """

    def __init__(self, path: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.path: tuple[str | int, ...] = tuple(path)


class ConfigModel(BaseModel):
    """Unknown fields are errors everywhere: a typo must never pass silently."""

    model_config = ConfigDict(extra="forbid")

    # Fields accepted (dstack documents them) that Ferry does not act on yet; see unsupported_fields().
    NOT_ACTED_ON: ClassVar[frozenset[str]] = frozenset()

    def unsupported_fields(self) -> list[str]:
        """The fields this file sets that Ferry does not act on yet, in declaration order.

        A field set to its "off" form (false, empty, null) asks for nothing Ferry would fail to do,
        so it is not reported.
        """
        return [
            name
            for name in type(self).model_fields
            if name in self.NOT_ACTED_ON
            and name in self.model_fields_set
            and _asks_for_something(getattr(self, name))
        ]


def _asks_for_something(value: Any) -> bool:
    return value is not None and value is not False and value != [] and value != {}


def shape_of(value: Any) -> str | None:
    """The YAML shape of a raw value, as the tag of a shape-discriminated union
    (see core.configuration.fields).

    Tags are written `<...>` so that core.configuration.loading can drop them from error paths.
    """
    if isinstance(value, bool):
        return "<bool>"
    if isinstance(value, int | float):
        return "<number>"
    if isinstance(value, str):
        return "<string>"
    if isinstance(value, list):
        return "<list>"
    if isinstance(value, dict):
        return "<map>"
    if isinstance(value, BaseModel):
        return "<map>"
    return None
