"""Ferry's services proxy: routes `/proxy/services/<project>/<run>/...` and `/proxy/models/<project>/v1/...`
to the ready replicas of running services, which the workers register in the store.

One aiohttp process serves both sides (a C HTTP parser, a pooled client, streaming and WebSockets in one
library). Nothing on a request's path touches the store: `directory` keeps an in-memory routing table
fresh from it in a thread, and `request_stats` / `draining` write back in batches. `python -m gateway`
runs it (gateway.main).
"""
