"""Backends: how a fleet with `nodes` creates and releases its instances (docs/backends.md).

Pure decisions only: what to ask a backend for (`core.backends.slurm`), and what its answers mean. The
calls themselves are activities (activities/provisioning.py, activities/slurm_login.py).
"""
