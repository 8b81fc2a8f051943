"""Every side effect the workflows need: backends, agent client, store writes (filled by the lifecycle issue)."""
