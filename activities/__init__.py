"""Every side effect the workflows need: backends, the agent client, store writes."""
