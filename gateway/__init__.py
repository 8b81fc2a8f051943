"""Ferry's services proxy: routes `/proxy/services/<project>/<run>/...` and `/proxy/models/<project>/v1/...`
to the ready replicas of running services, which the workers register in the store.

Every connection starts at the front door (`fast_path`: asyncio protocols), which holds each request
head to the proxy's rules (`rules`, one set for both paths) and forwards plain HTTP/1.1 requests to a
service with a ready replica itself; every other request is handed, with its connection, to the aiohttp
app (`app`: services and models APIs, held requests, WebSockets, errors; `forwarding` for its requests).
Nothing on a request's path touches the store: `directory` keeps an in-memory routing table fresh from it in
a thread, and `request_stats` / `draining` write back in batches. `python -m gateway` runs it (gateway.main).
"""
