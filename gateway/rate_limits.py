"""A service's `rate_limits`, as the proxy enforces them (docs/services.md#rate-limits).

dstack's gateway writes each limit as nginx's `limit_req ... burst=B nodelay`: per key value (the client's
address, or a header's value), a request passes if the key has sent at most `rps` requests a second, with
`burst` more allowed at once; the others get 429 and reach no replica. That is a token bucket: it holds
`burst + 1` tokens, refills `rps` a second, and a request that passes takes one. A request is held to the
limit whose `prefix` is the longest that starts its path within the service (none: no limit); a request
without the limit's header is not limited (nginx counts no request whose key is empty).

Decisions are pure functions of a bucket and the time (`take`, `worker_share`, `matching_rule`); the
RateLimiter keeps one bucket per (service run, prefix, key value), at most MAX_KEYS of them: a bucket
that has refilled whole is the same as none and goes; past MAX_KEYS the one idle longest goes.

With `--workers N` each proxy process keeps its own buckets (the kernel spreads connections over them) and
enforces 1/N of each limit: `rps / N`, and `ceil((burst + 1) / N)` tokens at once (`worker_share`).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

# Buckets one proxy process keeps at most (about 200 bytes each). Past it, the bucket idle longest goes:
# its key starts again with a full bucket, never with less than it had.
MAX_KEYS = 100_000
# Key values longer than this are kept as a digest: a header may be 8 KiB (gateway.rules.MAX_LINE).
_LONGEST_KEPT = 64
# Buckets looked at, oldest first, for having refilled whole, at each request: amortised expiry.
_EXPIRED_PER_TAKE = 2


@dataclass(frozen=True, slots=True)
class RateLimitRule:
    """One entry of a service's `rate_limits`, as the proxy matches it."""

    prefix: bytes  # of the path within the service, percent-decoded (request_path)
    rps: float
    burst: int
    header: str | None = None  # None: keyed by the client's address; else the header's name, lowercase


@dataclass(frozen=True, slots=True)
class BucketShape:
    """A bucket as one proxy process keeps it: `capacity` tokens at most, `rate` more a second."""

    rate: float
    capacity: int


# A key's bucket: (tokens it had, monotonic time it had them).
Bucket = tuple[float, float]
# What a request is keyed by, given a header's name (lowercase): its value, or None if it has none.
HeaderValue = Callable[[str], bytes | None]


def parse_rules(value: Any) -> tuple[RateLimitRule, ...]:
    """The rules of a configuration's `rate_limits` (its JSON, validated by
    core.configuration.service.RateLimit at submission); an entry of the wrong shape is skipped."""
    if not isinstance(value, list):
        return ()
    rules = []
    for entry in value:
        if not isinstance(entry, dict):
            continue
        prefix, rps, burst, key = (
            entry.get("prefix", "/"),
            entry.get("rps"),
            entry.get("burst", 0),
            entry.get("key"),
        )
        if not isinstance(prefix, str) or not isinstance(rps, int | float) or not isinstance(burst, int):
            continue
        if not (rps > 0 and math.isfinite(rps)) or burst < 0:
            continue
        header = None
        if isinstance(key, dict) and key.get("type") == "header":
            if not isinstance(key.get("header"), str):
                continue
            header = header_name(key["header"])
        rules.append(RateLimitRule(prefix=prefix.encode(), rps=float(rps), burst=burst, header=header))
    return tuple(rules)


def header_name(name: str) -> str:
    """A header as the rules name it: lowercase, with `_` as `-` (nginx's `$http_x_user` is X-User)."""
    return name.lower().replace("_", "-")


def request_path(target: bytes) -> bytes:
    """The path a prefix is matched against, as nginx matches a location: no query, percent-decoded,
    slashes merged and dot segments resolved, so that `/api/%61uth` or `/x/../api/auth` is `/api/auth`."""
    path = unquote_to_bytes(target.partition(b"?")[0])
    if b"//" not in path and b"/." not in path:
        return path
    parts = path.split(b"/")[1:]
    kept: list[bytes] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == b".." and kept:
            kept.pop()
        if part in (b"", b".", b".."):
            if last:
                kept.append(b"")  # a path ending in / (or /. or /..) keeps its trailing slash
            continue
        kept.append(part)
    return b"/" + b"/".join(kept)


def matching_rule(rules: tuple[RateLimitRule, ...], path: bytes) -> RateLimitRule | None:
    """The rule whose prefix is the longest that starts `path`; None if none does."""
    best: RateLimitRule | None = None
    for rule in rules:
        if path.startswith(rule.prefix) and (best is None or len(rule.prefix) > len(best.prefix)):
            best = rule
    return best


def worker_share(rule: RateLimitRule, workers: int) -> BucketShape:
    """The bucket of one of `workers` proxy processes: 1/workers of the rate, and of the `burst + 1`
    requests allowed at once, rounded up (each process lets one through at least), so that the
    processes together let through `rps` a second and at most `burst + workers` at once
    (docs/services.md#rate-limits)."""
    return BucketShape(rate=rule.rps / workers, capacity=-(-(rule.burst + 1) // workers))


def take(bucket: Bucket | None, shape: BucketShape, now: float) -> tuple[bool, Bucket]:
    """Whether a request passes, and the bucket after it: refilled for the time since, less the token
    the request takes if it passes. None is a full bucket (a key not seen, or long idle)."""
    if bucket is None:
        tokens = float(shape.capacity)
    else:
        had, at = bucket
        tokens = min(float(shape.capacity), had + max(0.0, now - at) * shape.rate)
    if tokens >= 1.0:
        return True, (tokens - 1.0, now)
    return False, (tokens, now)


def is_full(bucket: Bucket, shape: BucketShape, now: float) -> bool:
    """Whether the bucket has refilled whole by `now`: the same as no bucket at all."""
    had, at = bucket
    return had + max(0.0, now - at) * shape.rate >= shape.capacity


def key_value(value: bytes) -> bytes:
    """What a bucket is keyed by: the value, or a digest of a long one (the buckets' memory is bounded)."""
    if len(value) <= _LONGEST_KEPT:
        return value
    return hashlib.blake2b(value, digest_size=16).digest()


def too_many_requests(service_name: str, rule: RateLimitRule) -> str:
    """The 429's message: which limit the request is over (never the key's value)."""
    per = "client address" if rule.header is None else f"value of its {rule.header} header"
    return (
        f"too many requests to {service_name} under {rule.prefix.decode(errors='replace')}: the service "
        f"allows {rule.rps:g} a second (and {rule.burst} more at once) per {per}; try again later"
    )


_Key = tuple[str, bytes, bytes]  # (service run id, rule prefix, key value)


class RateLimiter:
    """The buckets of one proxy process (one of `workers`), on the event loop: no locking."""

    def __init__(
        self, workers: int = 1, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS
    ) -> None:
        self.workers = workers
        self._clock = clock
        self._max_keys = max_keys
        # Oldest use first; each bucket with the shape it was last taken from (to tell when it is full).
        self._buckets: OrderedDict[_Key, tuple[Bucket, BucketShape]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def refusal(
        self,
        run_id: str,
        rules: tuple[RateLimitRule, ...],
        path: bytes,
        client: bytes,
        header: HeaderValue,
    ) -> RateLimitRule | None:
        """The rule the request is over (it gets 429), or None: it passes, and has taken its token.

        `path`: the request's path within the service (request_path); `client`: its address."""
        rule = matching_rule(rules, path)
        if rule is None:
            return None
        value = client if rule.header is None else header(rule.header)
        if not value:
            return None  # no key: not limited (nginx's empty key)
        key = (run_id, rule.prefix, key_value(value))
        shape = worker_share(rule, self.workers)
        now = self._clock()
        buckets = self._buckets
        kept = buckets.pop(key, None)
        passed, bucket = take(None if kept is None else kept[0], shape, now)
        buckets[key] = (bucket, shape)
        self._expire(now)
        return None if passed else rule

    def _expire(self, now: float) -> None:
        buckets = self._buckets
        while len(buckets) > self._max_keys:
            buckets.popitem(last=False)
        for _ in range(_EXPIRED_PER_TAKE):
            oldest = next(iter(buckets.items()), None)
            if oldest is None or not is_full(oldest[1][0], oldest[1][1], now):
                return
            del buckets[oldest[0]]
