"""The autoscaler's rule (docs/services.md#autoscaling): how many replicas a service wants now.

desired = ceil(rps / target), within `replicas: min..max`. A change waits: a scale-up until
`scale_up_delay` has passed since the last change, a scale-down until `scale_down_delay` has; the clock
starts with the run (its first replicas are its first change). A service scaled to zero wakes at once,
with no delay: a request is waiting for it in the proxy. Pure: activities.services measures the rate,
the run (core.runs.scaling) acts on the answer.
"""

from __future__ import annotations

import math

from core.wire.services import ScalingRule


def wanted_replicas(rule: ScalingRule, rps: float) -> int:
    """The replicas the rate asks for, before any delay."""
    wanted = math.ceil(rps / rule.target - 1e-9) if rps > 0 else 0
    return min(max(wanted, rule.min_replicas), rule.max_replicas)


def desired_replicas(
    rule: ScalingRule, *, current: int, rps: float, last_change_at: float, now: float
) -> int:
    """The replica count to have now: `current` unless the rate asks for another and its delay is over."""
    wanted = wanted_replicas(rule, rps)
    if wanted > current:
        if current == 0 or now - last_change_at >= rule.scale_up_delay:
            return wanted
        return current
    if wanted < current and now - last_change_at >= rule.scale_down_delay:
        return wanted
    return current
