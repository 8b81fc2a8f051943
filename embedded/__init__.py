"""The embedded stack the CLI starts (`ferry server`, and any command when no FERRY_TEMPORAL_ADDRESS is set):
a Temporal dev server (`devserver.py`), one worker (`python -m worker.stack_entry`), the services proxy
and the local agent (`local_agent.py`), under FERRY_HOME (`stack.py`, its files `stack_files.py` and state
`stack_state.py`); the processes it starts and the private files they keep (`processes.py`); more workers
beside the stack's one (`extra_workers.py`).

Light to import: no Temporal SDK at module level. It imports no part of `worker/`: the worker is above it
(it serves the local instance, whose agent `local_agent.py` starts), and the stack starts it by module name.
"""
