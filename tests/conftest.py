"""Suite-wide settings."""

import os

from hypothesis import HealthCheck, settings

from store.keys import ENV_KEYS, new_key_line

# One key for every process of the run (store/keys.py): a test's client and the workers it starts in other
# processes seal alike whatever FERRY_HOME each is given, and no key is made in the user's ~/.ferry. The
# e2e tests drop FERRY_* variables: their stacks make their own in their FERRY_HOME.
os.environ.setdefault(ENV_KEYS, new_key_line())

# Hypothesis's timing checks flake on a loaded 2-core machine; the properties themselves are what counts.
settings.register_profile("ferry", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ferry")
