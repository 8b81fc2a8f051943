"""Temporal workflows: RunWorkflow, JobWorkflow and FleetWorkflow, which carry out what core decides
(docs/README.md)."""
