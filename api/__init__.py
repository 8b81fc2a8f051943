"""Ferry's own HTTP API (docs/teams.md#the-api): what every client goes through, with the caller's token."""
