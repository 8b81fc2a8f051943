"""`python -m api serve [--host H] [--port P]`: Ferry's API (docs/teams.md#the-api), served by uvicorn over
the store (--database-url, else FERRY_DATABASE_URL, else FERRY_HOME's SQLite).

`python -m api first-admin NAME`: a deployment's first global admin, made on its store and their token
printed once; refused once the store has an admin (docs/teams.md#the-first-user)."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from typing import TYPE_CHECKING

from core.services.replicas import token_hash
from core.teams.roles import GlobalRole
from store.opening import open_store

if TYPE_CHECKING:
    import uvicorn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api")
    parser.add_argument("--database-url", default=None)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8400)
    serve.add_argument("--ready-file", default=None, help="written with this process's pid once it listens")
    serve.add_argument("--embedded", action="store_true", help="served by the embedded stack")
    serve.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate (PEM)")
    serve.add_argument("--tls-key", default=None, help="and this private key (PEM)")
    first = commands.add_parser("first-admin", help="make the store's first global admin")
    first.add_argument("name")
    args = parser.parse_args(argv)
    store = open_store(args.database_url)
    if args.command == "first-admin":
        admins = store.admins()
        if admins:
            print(
                f"python -m api first-admin: the store has an admin already ({', '.join(sorted(admins))})",
                file=sys.stderr,
            )
            return 2
        token = secrets.token_urlsafe(32)
        if not store.add_user(args.name, GlobalRole.ADMIN, token_hash(token)):
            store.set_user_role(args.name, GlobalRole.ADMIN)
            store.set_token_hash(args.name, token_hash(token))
        print(token)
        return 0
    import asyncio

    import uvicorn

    from api.app import make_app

    tls_problem = _tls_problem(args.tls_cert, args.tls_key)
    if tls_problem is not None:
        print(f"python -m api serve: {tls_problem}", file=sys.stderr)
        return 2
    config = uvicorn.Config(
        make_app(store, embedded=args.embedded),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
    )
    import uvloop

    # uvloop's event loop, as the services proxy's (gateway/main.py): less CPU per request than asyncio's,
    # which every command through the API pays (docs/teams.md#the-apis-cost).
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve(uvicorn.Server(config), args.ready_file))
    return 0


def _tls_problem(cert: str | None, key: str | None) -> str | None:
    """Why the API cannot serve HTTPS with these files (docs/deployment.md#the-apis-tls); None if it can."""
    if (cert is None) != (key is None):
        return "--tls-cert and --tls-key go together"
    if cert is None or key is None:
        return None
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:
        return f"--tls-cert {cert} and --tls-key {key} do not load: {err}"
    return None


async def _serve(server: uvicorn.Server, ready_file: str | None) -> None:
    """Serve until SIGTERM; the ready file written once the port is bound (embedded/stack.py waits on it)."""
    import asyncio

    serving = asyncio.create_task(server.serve())
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)
    if server.started and ready_file is not None:
        from embedded.processes import private_opener

        with open(ready_file, "w", opener=private_opener) as out:
            out.write(str(os.getpid()))
    await serving


sys.exit(main())
