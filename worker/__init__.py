"""A Ferry worker process (`ferry worker`, worker.main), and how every Ferry process reaches Temporal: the
connection (`temporal.py`) and the payload codec it connects with (`codec.py`). The embedded stack (the
`embedded` package) runs one of these workers as `python -m worker.stack_entry`."""
