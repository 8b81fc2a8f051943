"""What the agent's code takes from Python 3.10 and 3.11, for the older Pythons it runs on: a host's own,
3.9 and later (docs/fleets.md#what-a-host-needs). On 3.11 and later each name is the standard library's
own, so nothing changes for the worker."""

from __future__ import annotations

import asyncio
import enum
import sys

if sys.version_info >= (3, 11):  # noqa: UP036 (the agent runs on 3.9 and 3.10 too)
    StrEnum = enum.StrEnum

    async def wait_set(event: asyncio.Event, seconds: float) -> bool:
        """Whether `event` is set within `seconds`. asyncio.timeout, not wait_for: on 3.11 wait_for makes
        a task of every wait."""
        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return False
        return True

else:

    class StrEnum(str, enum.Enum):  # noqa: UP042 (enum.StrEnum itself, for the Pythons before it)
        """enum.StrEnum as 3.11 has it: its members are their values, in str() and format() alike."""

        def __str__(self) -> str:
            return str(self.value)

        __format__ = str.__format__

        @staticmethod
        def _generate_next_value_(name: str, start: int, count: int, last_values: list[str]) -> str:
            return name.lower()

    async def wait_set(event: asyncio.Event, seconds: float) -> bool:
        try:
            await asyncio.wait_for(event.wait(), seconds)
        except asyncio.TimeoutError:  # noqa: UP041 (not yet the builtin TimeoutError before 3.11)
            return False
        return True
