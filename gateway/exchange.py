"""One request on the fast path and its answer: between a ClientConnection and a ReplicaConnection.

The request's head, rewritten (gateway.fast_path_rules.upstream_head), goes to a kept-alive connection to
the replica (gateway.replica_pool), or a new one; its body follows as it arrives, unbuffered (held only
while the connection opens). The answer comes back the same way: an answer with a Content-Length of at
most SMALL_ANSWER is read whole and written with its head in one write (one packet, one wake-up of the
client), others chunk by chunk as the replica sends them. Flow control holds both ways: a side that
cannot take more pauses reading on the other.

Failures, as gateway.forwarding has them: a replica that cannot be reached, or fails before its answer
(or within a small answer read whole), gives 502 with a body that says so; one that fails mid-answer has
the client's connection cut, so the answer is not taken as whole. A refused connection is retried once
on another ready replica; a lost connection before any answer, once, for a request that is idempotent
or bodiless and whose body sent so far was kept (up to RESEND_LIMIT). The replica is acquired in the
balancer for the exchange's whole life, so draining waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from gateway.door import Door
from gateway.fast_path_rules import (
    AnswerFraming,
    FastRoute,
    Framing,
    answer_framing,
    downstream_head,
    failed_message,
    may_resend,
    plain_reply,
    upstream_head,
)
from gateway.http1 import (
    LAST_CHUNK,
    MAX_HEAD,
    BodyFraming,
    ChunkedBody,
    LengthBody,
    MalformedBody,
    RequestHead,
    ResponseHead,
    UntilClose,
    chunk,
    parse_response_head,
)
from gateway.replica_pool import ReplicaConnection
from gateway.routing_table import Replica


class ClientConnection(Protocol):
    """What an exchange uses of its client's connection (gateway.fast_path.ClientConnection)."""

    door: Door
    address: str
    paused: int

    def write(self, data: bytes) -> None: ...
    def set_paused(self, reason: int, paused: bool) -> None: ...
    def abort(self) -> None: ...
    def exchange_done(self, close: bool) -> None: ...


log = logging.getLogger(__name__)

SMALL_ANSWER = 64 * 1024  # bytes: an answer with a Content-Length up to this is read whole, then sent
RESEND_LIMIT = 64 * 1024  # bytes of request body kept while sending, so that it can be sent again
_PENDING_LIMIT = 256 * 1024  # bytes of body held while the connection opens, before the client waits
PAUSED_FOR_REPLICA = 2  # the client's reading paused: the replica cannot take its body as fast as it comes


class Exchange:
    def __init__(
        self,
        client: ClientConnection,
        head: RequestHead,
        fast_route: FastRoute,
        replica: Replica,
        *,
        close_client: bool,
    ) -> None:
        self._client = client
        self._door = client.door
        self._head = head
        self._route = fast_route
        self._replica = replica
        self._close_client = close_client  # the client said Connection: close
        self._body: BodyFraming = ChunkedBody() if head.chunked else LengthBody(head.length or 0)
        self.request_complete = self._body.done
        self._has_body = not self._body.done
        self._pending: list[bytes] = []  # body for a connection still opening
        self._pending_size = 0
        self._sent: list[bytes] | None = []  # body sent to this replica, kept for a resend (None: too much)
        self._sent_size = 0
        self._connection: ReplicaConnection | None = None
        self._opening: asyncio.Task[None] | None = None
        self._resent = False
        self._answer_buffer = b""  # the answer's head, until it is whole
        self._answer_head: ResponseHead | None = None
        self._framing: AnswerFraming | None = None
        self._answer_body: BodyFraming = UntilClose()
        self._whole: list[bytes] | None = None  # a small answer's body, gathered
        self._head_written = False
        self._replica_reusable = True
        self._finished = False

    # --- the request ------------------------------------------------------------------------------

    def start(self) -> None:
        connection = self._door.pool.take(self._replica.url)
        if connection is not None:
            self._attach(connection)
        else:
            self._open()

    def client_data(self, data: bytes) -> bytes:
        """Takes the bytes of the request's body among `data`; returns those past its end."""
        if self._finished:
            return b""  # the answer is over and the connection closes: nobody needs the rest
        try:
            taken = self._body.feed(data)
        except MalformedBody as err:
            log.info("a client's chunked body is malformed: %s", err)
            self._give_up(cut_client=True)
            return b""
        body, rest = (data, b"") if taken == len(data) else (data[:taken], data[taken:])
        self.request_complete = self._body.done
        if body:
            connection = self._connection
            if connection is not None:
                connection.write(body)
                self._keep_sent(body)
            else:
                self._pending.append(body)
                self._pending_size += len(body)
                if self._pending_size > _PENDING_LIMIT:
                    self._client.set_paused(PAUSED_FOR_REPLICA, True)
        return rest

    def _keep_sent(self, body: bytes) -> None:
        if self._sent is not None:
            self._sent_size += len(body)
            if self._sent_size > RESEND_LIMIT:
                self._sent = None
            else:
                self._sent.append(body)

    def _open(self) -> None:
        self._opening = asyncio.get_running_loop().create_task(self._connect(self._replica))

    async def _connect(self, replica: Replica) -> None:
        try:
            connection = await self._door.pool.connect(replica.url)
        except (OSError, TimeoutError) as err:
            self._opening = None
            if not self._finished:
                self._failed_before_answer(err, reached=False)
            return
        self._opening = None
        if self._finished:
            self._door.pool.put_back(connection)
        else:
            self._attach(connection)

    def _attach(self, connection: ReplicaConnection) -> None:
        self._connection = connection
        connection.user = self
        head = upstream_head(self._head, self._route, self._replica.url, self._client.address)
        pending, self._pending, self._pending_size = self._pending, [], 0
        connection.write(head + b"".join(pending) if pending else head)
        self._sent, self._sent_size = [], 0
        for body in pending:
            self._keep_sent(body)
        if self._client.paused:
            self._client.set_paused(PAUSED_FOR_REPLICA, False)

    # --- ReplicaUser: the answer ------------------------------------------------------------------

    def replica_data(self, data: bytes) -> None:
        if self._finished:
            return
        if self._framing is None:
            self._answer_buffer = self._answer_buffer + data if self._answer_buffer else data
            if not self._read_answer_head():
                return
            data, self._answer_buffer = self._answer_buffer, b""
            if not data and not self._answer_body.done:
                return
        try:
            taken = self._answer_body.feed(data)
        except MalformedBody as err:
            self._failed_mid_answer(err)
            return
        if taken < len(data):
            self._replica_reusable = False  # more than its answer: the connection is not to be trusted
            data = data[:taken]
        if self._whole is not None:
            self._whole.append(data)
        elif self._framing is not None and self._framing.framing is Framing.UNTIL_CLOSE:
            self._client.write(chunk(data))
        elif data:
            self._client.write(data)
        if self._answer_body.done:
            self._answer_complete()

    def _read_answer_head(self) -> bool:
        """True once the answer's head is read (and acted on); its body's first bytes stay buffered."""
        while True:
            buffer = self._answer_buffer
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    self._failed_mid_answer(ValueError("an answer head that does not end"))
                return False
            head = parse_response_head(buffer[: end + 4])
            self._answer_buffer = buffer[end + 4 :]
            framing = None if head is None else answer_framing(head, self._head.method)
            if head is None or framing is None or head.status == 101:
                self._failed_mid_answer(ValueError("an answer the proxy cannot read"))
                return False
            if head.status >= 200:
                break  # 1xx: an interim answer, not passed on; the answer follows
        self._answer_head, self._framing = head, framing
        if framing.framing is Framing.LENGTH:
            self._answer_body = LengthBody(framing.length)
            if framing.length <= SMALL_ANSWER:
                self._whole = []
        elif framing.framing is Framing.CHUNKED:
            self._answer_body = ChunkedBody()
        elif framing.framing is Framing.NONE:
            self._answer_body = LengthBody(0)
        if self._whole is None:
            self._client.write(downstream_head(head, framing, self._close_client))
            self._head_written = True
        return True

    def _answer_complete(self) -> None:
        assert self._answer_head is not None and self._framing is not None
        if self._whole is not None:
            head = downstream_head(self._answer_head, self._framing, self._close_client)
            self._client.write(head + b"".join(self._whole))
            self._head_written = True
        reusable = self._framing.reusable and self._replica_reusable and self.request_complete
        self._finish(keep_connection=reusable, close_client=self._close_client or not self.request_complete)

    def replica_lost(self, exc: BaseException | None) -> None:
        self._connection = None
        if self._finished:
            return
        framing = self._framing
        if framing is not None and framing.framing is Framing.UNTIL_CLOSE:
            self._client.write(LAST_CHUNK)  # its end: the replica closing
            self._finish(keep_connection=False, close_client=self._close_client or not self.request_complete)
        elif framing is None and not self._answer_buffer:
            self._failed_before_answer(exc or ConnectionResetError("the replica closed the connection"))
        else:
            self._failed_mid_answer(exc or ConnectionResetError("the replica closed the connection"))

    def replica_writing_paused(self, paused: bool) -> None:
        self._client.set_paused(PAUSED_FOR_REPLICA, paused)

    # --- the client -------------------------------------------------------------------------------

    def client_writing_paused(self, paused: bool) -> None:
        if self._connection is not None:
            self._connection.set_reading(not paused)

    def client_lost(self) -> None:
        """The client went away: the replica's connection is closed (it learns as it writes again)."""
        self._give_up(cut_client=False)

    # --- ends -------------------------------------------------------------------------------------

    def _failed_before_answer(self, err: BaseException, reached: bool = True) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        target = None
        if not self._resent and may_resend(
            self._head.method, self._has_body, self._sent is not None, reached
        ):
            target = self._resend_target(reached)
        if target is None:
            log.info("replica %s failed before answering: %r", self._replica.id, err)
            self._reply_502(
                failed_message(self._route.service, self._replica.url, _reason(err), "before answering")
            )
            return
        self._resent = True
        self._door.balancer.acquire(target.id)
        self._door.balancer.release(self._replica.id)
        self._replica = target
        self._pending = [*(self._sent or []), *self._pending]
        self._pending_size = sum(len(b) for b in self._pending)
        self._answer_buffer = b""
        self._open()  # a new connection: another kept one may be just as stale

    def _resend_target(self, reached: bool) -> Replica | None:
        failed = self._replica
        current = self._door.directory.table.services.get(self._route.service.key)
        if current is None:
            return None
        alternative = self._door.balancer.pick(current, exclude=(failed.id,))
        if alternative is None and reached and any(r.id == failed.id for r in current.ready):
            return failed  # the only one: a kept-alive connection it had closed, most likely
        return alternative

    def _failed_mid_answer(self, err: BaseException) -> None:
        log.warning("replica %s failed mid-answer: %r", self._replica.id, err)
        if self._head_written:
            self._give_up(cut_client=True)
            return
        message = failed_message(self._route.service, self._replica.url, _reason(err), "mid-answer")
        self._reply_502(message)

    def _reply_502(self, message: str) -> None:
        close = self._close_client or not self.request_complete
        self._client.write(plain_reply(502, "Bad Gateway", message, close))
        self._head_written = True
        self._finish(keep_connection=False, close_client=close)

    def _give_up(self, *, cut_client: bool) -> None:
        if cut_client:
            self._client.abort()
        self._finish(keep_connection=False, close_client=True)

    def _finish(self, *, keep_connection: bool, close_client: bool) -> None:
        if self._finished:
            return
        self._finished = True
        if self._opening is not None:
            self._opening.cancel()
            self._opening = None
        connection, self._connection = self._connection, None
        if connection is not None:
            if keep_connection:
                if not connection.reading:
                    connection.set_reading(True)
                self._door.pool.put_back(connection)
            else:
                connection.close()
        self._door.balancer.release(self._replica.id)
        if self._client.paused:
            self._client.set_paused(PAUSED_FOR_REPLICA, False)
        self._client.exchange_done(close_client)


def _reason(err: BaseException) -> str:
    reason = str(err) or type(err).__name__
    return reason.splitlines()[0]
