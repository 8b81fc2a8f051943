"""The embedded stack the CLI starts (`ferry server`, and any command when no FERRY_TEMPORAL_ADDRESS is set):
a Temporal dev server (`devserver.py`), one worker (`stack_worker.py`, over worker.main), the services proxy
and the local agent (`local_agent.py`), under FERRY_HOME (`stack.py`, its files `stack_files.py` and state
`stack_state.py`); the processes it starts and the private files they keep (`processes.py`); more workers
beside the stack's one (`extra_workers.py`).

Light to import: no Temporal SDK at module level (the stack worker imports it when it runs).
"""
