"""ferry-agent: the host agent, playing dstack's shim and runner roles in one process per host."""
