"""The names Ferry gives its workflows and its records: workflow ids, job submission ids, the local fleet.

A workflow's id says what it runs (a run, one of its job submissions, a fleet, a schedule), so that a client
finds it from names alone; the store and the agents use the same ids for the same things.
"""

from __future__ import annotations


def run_workflow_id(project: str, run_name: str) -> str:
    return f"ferry/{project}/{run_name}"


def run_of_workflow(workflow_id: str) -> str | None:
    """The run workflow id of a run's or one of its jobs' workflows (`ferry/<project>/<run>[/...]`); None
    for a fleet's and for workflows that are not Ferry's."""
    parts = workflow_id.split("/")
    if len(parts) < 3 or parts[0] != "ferry" or (parts[2] == "fleet" and len(parts) == 4):
        return None
    return "/".join(parts[:3])


def project_workflows(project: str) -> str:
    """The prefix of every workflow id of a project's runs and jobs."""
    return f"ferry/{project}/"


def job_workflow_id(run_workflow: str, replica_num: int, job_num: int, submission_num: int) -> str:
    return f"{run_workflow}/r{replica_num}/j{job_num}/s{submission_num}"


def elements_workflow_id(run_workflow: str, shard: int) -> str:
    """A workflow of an array's elements, one of its shards (docs/runs.md#arrays); the fleet tells it of
    its elements together."""
    return f"{run_workflow}/elements/{shard}"


def is_elements_workflow(workflow_id: str) -> bool:
    parts = workflow_id.split("/")
    return len(parts) == 5 and parts[0] == "ferry" and parts[3] == "elements" and parts[4].isdigit()


def metrics_workflow_id(run_workflow: str, nonce: str) -> str:
    """One sample of a run's metrics (`ferry metrics`, docs/jobs.md#metrics): a workflow of its own, beside
    the run's, so that asking often never lengthens the jobs' histories."""
    return f"{run_workflow}/metrics/{nonce}"


def job_submission_id(run_id: str, replica_num: int, job_num: int, submission_num: int) -> str:
    """The store's id of a job submission, also its task id on the agent (no slashes allowed there)."""
    return f"{run_id}-r{replica_num}-j{job_num}-s{submission_num}"


def parse_job_submission_id(job_id: str) -> tuple[str, int, int, int] | None:
    """(run id, replica, job, submission) of a `job_submission_id`; None for any other string."""
    parts = job_id.rsplit("-", 3)
    if len(parts) != 4 or not parts[0]:
        return None
    run_id, *numbered = parts
    numbers = [part[1:] for part, letter in zip(numbered, "rjs", strict=True) if part[:1] == letter]
    if len(numbers) != 3 or not all(n.isdigit() and n.isascii() for n in numbers):
        return None
    replica, job, submission = (int(n) for n in numbers)
    return run_id, replica, job, submission


def placement_request_id(run_id: str, replica_num: int, submission_num: int) -> str:
    """A replica's placement request (its gang) at one submission, as its fleet's scheduler knows it."""
    return f"{run_id}-r{replica_num}-s{submission_num}"


# The fleet of this machine's agent: every project has one, started on demand, with one instance.
LOCAL_FLEET = "local"
LOCAL_INSTANCE = "local"  # the local fleet's one instance: this machine (the worker's own agent)


def fleet_workflow_id(project: str, fleet: str) -> str:
    """The FleetWorkflow (the fleet's scheduler); run names never hold a slash, so no run clashes."""
    return f"ferry/{project}/fleet/{fleet}"


def schedule_id(run_workflow_id: str, run_id: str) -> str:
    """A scheduled run's schedule: beside its workflow, named by its run id (names are reused)."""
    return f"{run_workflow_id}/schedule/{run_id}"


def stuck_stop_workflow_id(run_workflow: str) -> str:
    """A stuck run's stop from outside (docs/upgrades.md#stopping-a-stuck-run), beside its workflow."""
    return f"{run_workflow}/stuck-stop"
