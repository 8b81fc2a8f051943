"""The names activities are registered under: the contract between workflows and the worker's activities.

Workflow tests register doubles under the same names.
"""

RECORD_RUN = "record_run"
RECORD_PIPELINE_TASK = "record_pipeline_task"
PREPARE_TASK = "prepare_task"
START_JOB = "start_job"
# Both in one, for a job with nothing to wait for between them (docs/jobs.md#one-step-start).
PREPARE_AND_START = "prepare_and_start"
WATCH_JOB = "watch_job"  # a job's own watch, as workflows begun before the instance watch have it
WATCH_INSTANCE = "watch_instance"  # every job's on one instance (docs/jobs.md#the-instance-watch)
STOP_TASK = "stop_task"
RELEASE_TASK = "release_task"
# An array's elements' steps, many in one activity (workflows/elements.py).
START_MANY = "start_many"
STOP_MANY = "stop_many"
REMOVE_MANY = "remove_many"
SSH_ENDPOINT = "ssh_endpoint"  # `ferry attach`: the way into a running job (docs/attach.md)
TASK_METRICS = "task_metrics"  # `ferry metrics`: running jobs' CPU, memory and GPU use (docs/jobs.md#metrics)
WATCH_UTILIZATION = "watch_utilization"  # a job's GPUs against its utilization_policy (docs/jobs.md)
ATTACH_VOLUMES = "attach_volumes"  # a job's named volumes, taken once it is placed (docs/volumes.md)
DETACH_VOLUMES = "detach_volumes"  # and freed once its process has ended

# The fleet scheduler's effects (workflows/fleet.py).
LOCAL_INSTANCE = "local_instance"
DEPLOY_INSTANCE = "deploy_instance"
WATCH_FLEET_HEALTH = "watch_fleet_health"
WATCH_LOCAL_INSTANCE = "watch_local_instance"
CLEAN_INSTANCE = "clean_instance"
RECORD_FLEET = "record_fleet"
STOP_FLEET = "stop_fleet"

# Services (activities/services.py): readiness, draining and load.
PROBE_REPLICA = "probe_replica"
DRAIN_REPLICA = "drain_replica"
UNREGISTER_REPLICA = "unregister_replica"
WATCH_LOAD = "watch_load"
ROUTER_ADDRESS = "router_address"

# Schedules (activities/schedules.py): a scheduled run's Temporal Schedule.
CREATE_SCHEDULE = "create_schedule"
DELETE_SCHEDULE = "delete_schedule"
UPDATE_SCHEDULE = "update_schedule"

# Dependencies (activities/run_watch.py): a run waited for is asked for its news.
WATCH_RUN = "watch_run"

# Notifications (activities/notifications.py): a run's webhook called (docs/runs.md#notifications).
DELIVER_NOTIFICATION = "deliver_notification"

# A stuck run stopped from outside (activities/stuck_stop.py, docs/upgrades.md#stopping-a-stuck-run).
END_RUN_WORKFLOWS = "end_run_workflows"
REMOVE_RUN_TASKS = "remove_run_tasks"
RECORD_STUCK_STOP = "record_stuck_stop"
SEND_SIGNALS = "send_signals"

# An elastic fleet's backend (activities/provisioning.py, docs/backends.md).
CREATE_GROUP = "create_group"
WATCH_GROUPS = "watch_groups"
START_GROUP = "start_group"
RELEASE_GROUP = "release_group"
