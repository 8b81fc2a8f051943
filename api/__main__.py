"""`python -m api [--host H] [--port P] [--database-url URL]`: Ferry's API (docs/teams.md#the-api), served by
uvicorn over the store (FERRY_DATABASE_URL, or FERRY_HOME's SQLite by default)."""

from __future__ import annotations

import argparse

import uvicorn

from api.app import make_app
from store.opening import open_store


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m api")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8400)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)
    app = make_app(open_store(args.database_url))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


main()
