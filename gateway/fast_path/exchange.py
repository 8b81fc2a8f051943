"""One request on the fast path and its answer: between a ClientConnection and a ReplicaConnection.

The request's head, rewritten (gateway.fast_path.routing.upstream_head), goes to a kept-alive connection to
the replica (gateway.fast_path.replica_pool), or a new one; its body follows as it arrives, unbuffered (held
only while the connection opens). The answer comes back the same way: an answer with a Content-Length of at
most SMALL_ANSWER is read whole and written with its head in one write (one packet, one wake-up of the
client; most often the very bytes the replica sent), others chunk by chunk as the replica sends them.
Flow control holds both ways: a side that cannot take more pauses reading on the other.

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

from gateway.fast_path.door import Door
from gateway.fast_path.heads import AnswerHead, Framing, RequestHead, parse_answer_head
from gateway.fast_path.http1 import (
    LAST_CHUNK,
    MAX_ANSWER_HEAD,
    BodyFraming,
    ChunkedBody,
    LengthBody,
    MalformedBody,
    UntilClose,
    chunk,
)
from gateway.fast_path.replica_pool import ReplicaConnection
from gateway.fast_path.routing import FastRoute, downstream_head, upstream_head
from gateway.routing_table import Replica
from gateway.rules import (
    MALFORMED_CHUNKED,
    SMALL_ANSWER,
    failed_message,
    may_resend,
    plain_reply,
    refusal_bytes,
)


class ExchangeClient(Protocol):
    """What an exchange uses of its client's connection (gateway.fast_path.connection.ClientConnection)."""

    door: Door
    address: bytes
    scheme: bytes  # b"https" on the TLS listener (X-Forwarded-Proto)
    paused: int

    def write(self, data: bytes) -> None: ...
    def set_paused(self, reason: int, paused: bool) -> None: ...
    def abort(self) -> None: ...
    def exchange_done(self, close: bool) -> None: ...


log = logging.getLogger(__name__)

RESEND_LIMIT = 64 * 1024  # bytes of request body kept while sending, so that it can be sent again
_PENDING_LIMIT = 256 * 1024  # bytes of body held while the connection opens, before the client waits
PAUSED_FOR_REPLICA = 2  # the client's reading paused: the replica cannot take its body as fast as it comes


class Exchange:
    """One request and its answer. One is made for every request, so its attributes have class-level
    defaults: a plain GET and its small answer set only a few of them."""

    request_complete = True  # the request's body has all come (a bodiless request: from the start)
    _body: BodyFraming | None = None  # the request's body, while it is coming
    _pending: list[bytes] | None = None  # body for a connection still opening
    _pending_size = 0
    _kept: list[bytes] | None = None  # body sent to this replica, kept for a resend
    _kept_size = 0  # over RESEND_LIMIT: `_kept` is dropped, and the request cannot be sent again
    _connection: ReplicaConnection | None = None
    _opening: asyncio.Task[None] | None = None
    _resent = False
    _answer_buffer = b""  # the answer's head, until it is whole
    _answer: AnswerHead | None = None
    _answer_body: BodyFraming | None = None
    _whole: list[bytes] | None = None  # a small answer's body, gathered
    _rechunked = False  # an answer delimited by the replica closing: the client gets it chunked
    _unsent_head = b""  # the answer's head, until it goes with the first bytes of its body
    _head_written = False  # the client has the answer's head (or gets it next): a failure now cuts it
    _replica_reusable = True
    _finished = False

    def __init__(
        self,
        client: ExchangeClient,
        head: RequestHead,
        fast_route: FastRoute,
        replica: Replica,
        *,
        close_client: bool,
        forward_authorization: bool = False,
    ) -> None:
        self._client = client
        self._door = client.door
        self._head = head
        self._route = fast_route
        self._service = fast_route[0]
        self._replica = replica
        self._close_client = close_client  # the client said Connection: close
        self._forward_authorization = forward_authorization
        if head.chunked or head.length:
            self._body = ChunkedBody() if head.chunked else LengthBody(head.length)
            self.request_complete = False

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
        body_framing = self._body
        if body_framing is None:
            return data  # a bodiless request: all of it is the next requests'
        try:
            taken = body_framing.feed(data)
        except MalformedBody as err:
            log.info("a client's chunked body is malformed: %s", err)
            self._refuse_body()
            return b""
        body, rest = (data, b"") if taken == len(data) else (data[:taken], data[taken:])
        self.request_complete = body_framing.done
        if body:
            connection = self._connection
            if connection is not None:
                connection.write(body)
                self._keep_sent(body)
            else:
                if self._pending is None:
                    self._pending = []
                self._pending.append(body)
                self._pending_size += len(body)
                if self._pending_size > _PENDING_LIMIT:
                    self._client.set_paused(PAUSED_FOR_REPLICA, True)
        return rest

    def _keep_sent(self, body: bytes) -> None:
        self._kept_size += len(body)
        if self._kept_size > RESEND_LIMIT:
            self._kept = None
        elif self._kept is None:
            self._kept = [body]
        else:
            self._kept.append(body)

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
        head = upstream_head(
            self._head,
            self._route,
            connection.host,
            self._client.address,
            self._forward_authorization,
            self._client.scheme,
        )
        pending = self._pending
        if not pending:
            connection.write(head)
            return
        self._pending, self._pending_size = None, 0
        connection.write(head + b"".join(pending))
        self._kept, self._kept_size = None, 0
        for body in pending:
            self._keep_sent(body)
        if self._client.paused:
            self._client.set_paused(PAUSED_FOR_REPLICA, False)

    # --- ReplicaUser: the answer ------------------------------------------------------------------

    def replica_data(self, data: bytes) -> None:
        if self._finished:
            return
        answer_body = self._answer_body
        if answer_body is None:
            rest = self._answer_began(data)
            answer_body = self._answer_body
            if rest is None or answer_body is None:
                return
            data = rest
            if not data and not answer_body.done:
                self._pass_on(b"")  # the head alone, at once: the body may be long in coming (SSE)
                return
        try:
            taken = answer_body.feed(data)
        except MalformedBody as err:
            self._failed_mid_answer(err)
            return
        if taken < len(data):
            self._replica_reusable = False  # more than its answer: the connection is not to be trusted
            data = data[:taken]
        if self._whole is not None:
            self._whole.append(data)
        else:
            self._pass_on(data)
        if answer_body.done:
            self._answer_complete()

    def _pass_on(self, data: bytes) -> None:
        """Sends the client these bytes of the answer's body, after its head if that is not sent yet."""
        if self._rechunked:
            data = chunk(data)
        if self._unsent_head:
            data, self._unsent_head = self._unsent_head + data, b""
        if data:
            self._client.write(data)

    def _answer_began(self, data: bytes) -> bytes | None:
        """Reads the answer's head from what came so far (sends the whole answer if it is small and here);
        the bytes that follow it, or None if there is nothing more to do with them."""
        buffer = self._answer_buffer + data if self._answer_buffer else data
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self._answer_buffer = buffer
                if len(buffer) > MAX_ANSWER_HEAD:
                    self._failed_mid_answer(ValueError("an answer head that does not end"))
                return None
            head_end = end + 4
            answer = parse_answer_head(buffer[:head_end], self._head.method)
            if answer is None:
                self._failed_mid_answer(ValueError("an answer the proxy cannot read"))
                return None
            if answer.status >= 200:
                break
            buffer = buffer[head_end:]  # 1xx: an interim answer, not passed on; the answer follows
        self._answer_buffer = b""
        self._answer = answer
        rest = buffer[head_end:]
        framing = answer.framing
        if framing is Framing.LENGTH:
            length = answer.length
            if length <= SMALL_ANSWER and len(rest) >= length:  # all here: the common case
                self._small_answer(answer, buffer, rest)
                return None
            self._answer_body = LengthBody(length)
            if length <= SMALL_ANSWER:
                self._whole = []
        elif framing is Framing.CHUNKED:
            self._answer_body = ChunkedBody()
        elif framing is Framing.NONE:
            self._answer_body = LengthBody(0)
        else:
            self._answer_body, self._rechunked = UntilClose(), True
        if self._whole is None:  # sent with the body's first bytes: one write
            self._unsent_head = downstream_head(answer, self._close_client)
            self._head_written = True
        return rest

    def _small_answer(self, answer: AnswerHead, buffer: bytes, rest: bytes) -> None:
        """A small answer, whole in `buffer` (its head, then `rest`): sent in one write, as it came when
        the client may have it so."""
        if len(rest) > answer.length:
            self._replica_reusable = False  # more than its answer: the connection is not to be trusted
            whole = downstream_head(answer, self._close_client) + rest[: answer.length]
        elif answer.verbatim and not self._close_client:
            whole = buffer  # the very bytes the replica sent
        else:
            whole = downstream_head(answer, self._close_client) + rest
        self._client.write(whole)
        self._head_written = True
        self._answer_over(answer)

    def _answer_complete(self) -> None:
        answer = self._answer
        assert answer is not None
        if self._whole is not None:
            self._client.write(downstream_head(answer, self._close_client) + b"".join(self._whole))
            self._head_written = True
        self._answer_over(answer)

    def _answer_over(self, answer: AnswerHead) -> None:
        reusable = answer.reusable and self._replica_reusable and self.request_complete
        self._finish(keep_connection=reusable, close_client=self._close_client or not self.request_complete)

    def replica_lost(self, exc: BaseException | None) -> None:
        self._connection = None
        if self._finished:
            return
        answer = self._answer
        if answer is not None and answer.framing is Framing.UNTIL_CLOSE:
            self._client.write(LAST_CHUNK)  # its end: the replica closing
            self._finish(keep_connection=False, close_client=self._close_client or not self.request_complete)
        elif answer is None and not self._answer_buffer:
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
        body_kept = self._kept_size <= RESEND_LIMIT
        method = self._head.method.decode("latin-1")
        if not self._resent and may_resend(method, self._body is not None, body_kept, reached):
            target = self._resend_target(reached)
        if target is None:
            log.info("replica %s failed before answering: %r", self._replica.id, err)
            self._reply_502(failed_message(self._service, self._replica.url, err, "before answering"))
            return
        self._resent = True
        self._door.balancer.acquire(target.id)
        self._door.balancer.release(self._replica.id)
        self._replica = target
        self._pending = [*(self._kept or []), *(self._pending or [])]
        self._pending_size = sum(len(b) for b in self._pending)
        self._answer_buffer = b""
        self._open()  # a new connection: another kept one may be just as stale

    def _resend_target(self, reached: bool) -> Replica | None:
        failed = self._replica
        current = self._door.directory.table.services.get(self._service.key)
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
        message = failed_message(self._service, self._replica.url, err, "mid-answer")
        self._reply_502(message)

    def _reply_502(self, message: str) -> None:
        close = self._close_client or not self.request_complete
        self._client.write(plain_reply(502, "Bad Gateway", message, close))
        self._head_written = True
        self._finish(keep_connection=False, close_client=close)

    def _refuse_body(self) -> None:
        """The request's body is malformed: 400 if the client has no answer yet, else its answer is cut;
        the replica, which got a part of it, loses its connection."""
        if self._head_written:
            self._give_up(cut_client=True)
            return
        self._client.write(refusal_bytes(MALFORMED_CHUNKED))
        self._head_written = True
        self._finish(keep_connection=False, close_client=True)

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
        connection = self._connection
        if connection is not None:
            self._connection = None
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
