"""Services: what the proxies route to, how replicas become ready, and how many replicas a service wants.

Pure decisions (docs/services.md); the proxy is gateway/, the probing and draining are activities.services.
"""
