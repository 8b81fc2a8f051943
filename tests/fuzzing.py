"""schemathesis's generated cases of one API operation, each given to a check: what the fuzz tests of the
agent's API (tests/agent/test_agent_schemathesis.py) and Ferry's (tests/api/test_api_schemathesis.py) share.
The cases come from schemathesis's Hypothesis strategies, derandomized: every run sends the same ones."""

from __future__ import annotations

from collections.abc import Callable

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode


def fuzz_operation(
    operation: schemathesis.APIOperation,
    mode: GenerationMode,
    max_examples: int,
    exercise: Callable[[schemathesis.Case], None],
) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: schemathesis.Case) -> None:
        exercise(case)

    try:
        fuzz()
    except Unsatisfiable:
        # Negative mode, where no input can be invalid: an operation that takes any string, or nothing.
        if mode != GenerationMode.NEGATIVE:
            raise
