"""`python -m cli`: the `ferry` command."""

from cli.main import app

app(prog_name="ferry")
