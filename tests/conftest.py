"""Suite-wide settings."""

from hypothesis import HealthCheck, settings

# Hypothesis's timing checks flake on a loaded 2-core machine; the properties themselves are what counts.
settings.register_profile("ferry", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ferry")
