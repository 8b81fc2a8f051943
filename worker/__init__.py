"""The worker entrypoint and the embedded stack (filled by the lifecycle and CLI issues)."""
