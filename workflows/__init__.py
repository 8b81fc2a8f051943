"""Temporal workflows: RunWorkflow, JobWorkflow and the fleet scheduler (filled by the lifecycle issue)."""
