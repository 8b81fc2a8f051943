"""Durations as configuration fields: any spelling core.durations reads, kept as seconds."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

from core.durations import format_duration, parse_duration, parse_optional_duration

# Pydantic field types: parsed from any spelling, kept as seconds, written back in the short form.
Duration = Annotated[int, BeforeValidator(parse_duration), PlainSerializer(format_duration, when_used="json")]
OptionalDuration = Annotated[
    int | None, BeforeValidator(parse_optional_duration), PlainSerializer(format_duration, when_used="json")
]
