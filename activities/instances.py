"""The instances this worker can reach, by name: each one's agent client.

Placement decisions travel through Temporal as instance names; the address and token of an agent stay in
the worker (tokens never go into workflow histories).
"""

from __future__ import annotations

from activities.agent_client import AgentClient

LOCAL_INSTANCE = "local"


class UnknownInstance(LookupError):
    pass


class InstanceDirectory:
    def __init__(self) -> None:
        self._clients: dict[str, AgentClient] = {}

    def add(self, name: str, client: AgentClient) -> None:
        self._clients[name] = client

    def client(self, name: str) -> AgentClient:
        try:
            return self._clients[name]
        except KeyError:
            raise UnknownInstance(f"instance {name!r} is not known to this worker") from None

    def names(self) -> list[str]:
        return sorted(self._clients)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
