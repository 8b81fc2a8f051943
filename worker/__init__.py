"""The worker (`ferry worker`, worker.main) and the embedded stack the CLI starts (`ferry server`)."""
