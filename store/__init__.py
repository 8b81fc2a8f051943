"""sqlmodel tables, engine and migrations (filled by the lifecycle issue)."""
