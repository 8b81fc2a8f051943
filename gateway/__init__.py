"""Ferry's services proxy: routes `/proxy/services/<project>/<run>/...` and `/proxy/models/<project>/v1/...`
to the ready replicas of running services, which the workers register in the store.

Plain HTTP/1.1 requests to a service with a ready replica go on a fast path of asyncio protocols
(`front_door`, `fast_path`, `exchange`, `replica_pool`; pure rules in `heads`, `http1` and
`fast_path_rules`); every other request is handed, with its connection, to the aiohttp app (`app`:
services and models APIs, held requests, WebSockets, errors). Nothing on a request's path touches the
store: `directory` keeps an in-memory routing table fresh from it in a thread, and `request_stats` /
`draining` write back in batches. `python -m gateway` runs it (gateway.main).
"""
