"""The proxy's front door: every client connection starts here (`front_door`, one `connection` each).

Each request head is held to gateway.rules' limits (`head_checks`) and read (`heads`, with httptools).
A plain HTTP/1.1 request for a service with a ready replica is routed (`routing`) and forwarded by an
`exchange` on a kept-alive connection to the replica (`replica_pool`), its bodies followed by `http1`'s
framing; any other is handed, with its connection, to the aiohttp app for that one request
(`app_connection`). `door` is what connections and exchanges use of the front door. docs/services.md,
"The fast path" and "Requests the proxy refuses".
"""
