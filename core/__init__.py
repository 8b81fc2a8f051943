"""Ferry's domain, pure: configurations, resources, statuses, lifecycle rules and the eventlog.

Nothing here imports Temporal, the store or the network.
"""
