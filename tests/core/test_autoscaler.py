"""The autoscaler's rule as a table: rate, current count and the time since the last change."""

from __future__ import annotations

import pytest

from core.services.autoscaler import desired_replicas, wanted_replicas
from core.wire.services import ScalingRule

RULE = ScalingRule(
    min_replicas=0, max_replicas=4, target=10, window=60, scale_up_delay=30, scale_down_delay=120
)


@pytest.mark.parametrize(
    ("rps", "wanted"),
    [(0, 0), (0.01, 1), (10, 1), (10.5, 2), (20, 2), (39.9, 4), (1000, 4)],
)
def test_wanted_is_the_rate_over_the_target_within_the_range(rps: float, wanted: int) -> None:
    assert wanted_replicas(RULE, rps) == wanted


def test_the_minimum_holds_without_traffic() -> None:
    rule = RULE.model_copy(update={"min_replicas": 2})
    assert wanted_replicas(rule, 0) == 2


@pytest.mark.parametrize(
    ("current", "rps", "since_change", "desired", "why"),
    [
        (1, 25, 31, 3, "up after scale_up_delay"),
        (1, 25, 29, 1, "up waits for scale_up_delay"),
        (0, 0.5, 0, 1, "from zero at once: a request waits in the proxy"),
        (0, 35, 0, 4, "from zero to what the rate asks"),
        (3, 5, 121, 1, "down after scale_down_delay"),
        (3, 5, 119, 3, "down waits for scale_down_delay"),
        (1, 0, 121, 0, "to zero after scale_down_delay"),
        (2, 15, 0, 2, "no change: nothing to wait for"),
        (6, 15, 200, 2, "above the maximum (a smaller range re-applied)"),
    ],
)
def test_desired_replicas(current: int, rps: float, since_change: float, desired: int, why: str) -> None:
    assert desired_replicas(RULE, current=current, rps=rps, last_change_at=1000, now=1000 + since_change) == (
        desired
    ), why
