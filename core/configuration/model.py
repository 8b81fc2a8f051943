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
    # A dotted name (`resources.shm_size`) is a field of a nested model.
    NOT_ACTED_ON: ClassVar[frozenset[str]] = frozenset()

    def unsupported_fields(self) -> list[str]:
        """The fields of NOT_ACTED_ON this file asks for (see asks_for), in declaration order."""
        found: list[str] = []
        for name in type(self).model_fields:
            # The field itself, then its nested fields (in name order).
            entries = [name] if name in self.NOT_ACTED_ON else []
            entries += sorted(entry for entry in self.NOT_ACTED_ON if entry.startswith(f"{name}."))
            found.extend(entry for entry in entries if self.asks_for(entry))
        return found

    def asks_for(self, field: str) -> bool:
        """Whether this file asks for what `field` (dotted for a nested one) does: the file sets it, and
        not to its "off" form (false, empty, null), which asks for nothing Ferry would fail to do.

        A field of a list's items (`groups.resources.shm_size`) is asked for when one item asks for it.
        Models override it for a field whose default asks for something (a service's `auth`) or whose
        value asks for something only past a point (a range of `replicas`).
        """
        return _asks_for(self, field.split("."))


def _asks_for(value: Any, parts: list[str]) -> bool:
    if not parts:
        return _asks_for_something(value)
    if isinstance(value, list):
        return any(_asks_for(item, parts) for item in value)
    if not isinstance(value, BaseModel) or parts[0] not in value.model_fields_set:
        return False
    return _asks_for(getattr(value, parts[0]), parts[1:])


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
