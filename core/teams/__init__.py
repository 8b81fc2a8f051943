"""Users, projects and roles: the decisions of a shared Ferry (docs/teams.md)."""
