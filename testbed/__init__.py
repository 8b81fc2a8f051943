"""Namespaced sshd test hosts and the fleet helpers shared by the tests and the bench.

Not a product package (the wheel leaves it out): tests/fleet and bench.recovery import it from the
repository. netns makes the hosts, helpers deploys agents on them, fleets runs an SSH fleet of them.
"""
