"""The service proxy and its request statistics (filled by a later issue)."""
