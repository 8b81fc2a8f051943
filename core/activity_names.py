"""The names activities are registered under: the contract between workflows and the worker's activities.

Workflow tests register doubles under the same names.
"""

RECORD_RUN = "record_run"
RECORD_JOB = "record_job"
ALLOCATE = "allocate"
PREPARE_TASK = "prepare_task"
START_JOB = "start_job"
WATCH_JOB = "watch_job"
STOP_TASK = "stop_task"
RELEASE_TASK = "release_task"
