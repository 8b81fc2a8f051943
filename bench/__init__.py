"""Ferry's benchmarks: `python -m bench.run` (see bench/README.md). Not part of the test run."""
