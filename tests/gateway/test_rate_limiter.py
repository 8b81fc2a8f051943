"""gateway.rate_limits' decisions, on a fake clock: the token bucket (nginx's `limit_req ... nodelay`), the
longest prefix, the keys, each worker's share, and the buckets' bounded memory."""

from __future__ import annotations

import pytest

from gateway.rate_limits import (
    BucketShape,
    RateLimiter,
    RateLimitRule,
    key_value,
    matching_rule,
    parse_rules,
    request_path,
    take,
    too_many_requests,
    worker_share,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def no_header(_name: str) -> bytes | None:
    return None


def rule(prefix: str = "/", rps: float = 1.0, burst: int = 0, header: str | None = None) -> RateLimitRule:
    return RateLimitRule(prefix=prefix.encode(), rps=rps, burst=burst, header=header)


def passes(limiter: RateLimiter, rules: tuple[RateLimitRule, ...], count: int, **how: object) -> int:
    """How many of `count` requests at the same instant pass."""
    path = how.get("path", b"/")
    client = how.get("client", b"10.0.0.1")
    header = how.get("header", no_header)
    run_id = how.get("run_id", "run-1")
    return sum(
        limiter.refusal(run_id, rules, path, client, header) is None  # type: ignore[arg-type]
        for _ in range(count)
    )


# --- the bucket -----------------------------------------------------------------------------------------


def test_a_new_key_has_burst_plus_one_requests_at_once_then_one_per_interval() -> None:
    shape = BucketShape(rate=4.0, capacity=10)  # rps: 4, burst: 9 (dstack's example)
    bucket = None
    results = []
    for _ in range(12):
        passed, bucket = take(bucket, shape, 0.0)
        results.append(passed)
    assert results == [True] * 10 + [False] * 2
    assert take(bucket, shape, 0.2)[0] is False  # 0.8 of a token
    assert take(bucket, shape, 0.25)[0] is True  # a whole one: 1/rps later


def test_a_refused_request_takes_nothing() -> None:
    shape = BucketShape(rate=1.0, capacity=1)
    _, bucket = take(None, shape, 0.0)
    for moment in (0.1, 0.5, 0.9):
        passed, bucket = take(bucket, shape, moment)
        assert not passed
    assert take(bucket, shape, 1.0)[0] is True  # refilled as if the refused ones never came


def test_an_idle_bucket_fills_up_to_its_capacity_only() -> None:
    shape = BucketShape(rate=10.0, capacity=3)
    _, bucket = take(None, shape, 0.0)
    passed = 0
    for _ in range(10):
        ok, bucket = take(bucket, shape, 3600.0)
        passed += ok
    assert passed == 3


# --- which limit, which key -----------------------------------------------------------------------------


def test_the_longest_prefix_wins() -> None:
    rules = (rule("/"), rule("/api/"), rule("/api/auth/"))
    assert matching_rule(rules, b"/api/auth/login") == rules[2]
    assert matching_rule(rules, b"/api/users") == rules[1]
    assert matching_rule(rules, b"/index.html") == rules[0]
    assert matching_rule(rules[1:], b"/index.html") is None  # no limit
    assert matching_rule((rule("/api"),), b"/apis") is not None  # a prefix of the string, as nginx's


@pytest.mark.parametrize(
    ("target", "path"),
    [
        (b"/api/auth/login?next=/x", b"/api/auth/login"),
        (b"/api/%61uth/login", b"/api/auth/login"),
        (b"//api//auth/", b"/api/auth/"),
        (b"/x/../api/./auth/", b"/api/auth/"),
        (b"/api/auth/..", b"/api/"),
        (b"/../../api", b"/api"),
        (b"/", b"/"),
        (b"/.well-known/x", b"/.well-known/x"),
    ],
)
def test_a_prefix_is_matched_against_the_decoded_normalised_path(target: bytes, path: bytes) -> None:
    assert request_path(target) == path


def test_each_client_address_has_its_own_bucket() -> None:
    limiter = RateLimiter(clock=FakeClock())
    rules = (rule(burst=2),)
    assert passes(limiter, rules, 5, client=b"10.0.0.1") == 3
    assert passes(limiter, rules, 5, client=b"10.0.0.2") == 3
    assert passes(limiter, rules, 5, client=b"10.0.0.2", run_id="run-2") == 3  # another service


def test_a_header_key_limits_per_value_and_not_without_the_header() -> None:
    limiter = RateLimiter(clock=FakeClock())
    rules = (rule(burst=1, header="authorization"),)

    def alice(name: str) -> bytes | None:
        return b"Bearer alice" if name == "authorization" else None

    def bob(name: str) -> bytes | None:
        return b"Bearer bob" if name == "authorization" else None

    assert passes(limiter, rules, 4, header=alice) == 2
    assert passes(limiter, rules, 4, header=alice, client=b"10.9.9.9") == 0  # the address is no matter
    assert passes(limiter, rules, 4, header=bob) == 2
    assert passes(limiter, rules, 4, header=no_header) == 4  # nginx counts no request with an empty key


def test_each_prefix_has_its_own_bucket_for_one_client() -> None:
    limiter = RateLimiter(clock=FakeClock())
    rules = (rule("/", burst=3), rule("/api/auth/", burst=0))
    assert passes(limiter, rules, 3, path=b"/api/auth/login") == 1
    assert passes(limiter, rules, 6, path=b"/home") == 4


def test_a_limit_refills_with_the_clock() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock=clock)
    rules = (rule(rps=2.0),)
    assert passes(limiter, rules, 3) == 1
    clock.now += 0.5
    assert passes(limiter, rules, 3) == 1
    clock.now += 10
    assert passes(limiter, rules, 3) == 1  # burst 0: one at a time, however long it waited


def test_a_long_key_value_is_kept_as_a_digest() -> None:
    long = b"Bearer " + b"x" * 8000
    assert len(key_value(long)) == 16 and key_value(long) != key_value(long + b"y")
    assert key_value(b"10.0.0.1") == b"10.0.0.1"


# --- memory ---------------------------------------------------------------------------------------------


def test_buckets_that_refilled_whole_are_dropped() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock=clock)
    rules = (rule(rps=1.0, burst=4),)
    for number in range(50):
        passes(limiter, rules, 1, client=f"10.0.0.{number}".encode())
    assert len(limiter) == 50
    clock.now += 1.0  # each had 4 tokens of 5 left: full again after a second
    for number in range(30):
        passes(limiter, rules, 1, client=f"10.1.0.{number}".encode())
    assert len(limiter) == 30  # two old ones dropped per request: all 50 gone


def test_the_buckets_are_bounded_and_the_idle_longest_go_first() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock=clock, max_keys=10)
    rules = (rule(rps=1 / 60),)
    assert passes(limiter, rules, 1, client=b"first") == 1
    for number in range(100):
        passes(limiter, rules, 1, client=str(number).encode())
        assert len(limiter) <= 10
    # `first` was dropped: it starts again with a full bucket (more lenient, never less).
    assert passes(limiter, rules, 2, client=b"first") == 1
    assert passes(limiter, rules, 1, client=b"99") == 0  # kept: still empty


# --- workers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rps", "burst", "workers", "rate", "capacity"),
    [
        (4.0, 9, 1, 4.0, 10),
        (4.0, 9, 2, 2.0, 5),
        (4.0, 9, 4, 1.0, 3),  # 12 at once in all: burst + 1 = 10, rounded up
        (1.0, 0, 4, 0.25, 1),  # each process lets one through at least
        (1.0, 3, 2, 0.5, 2),
    ],
)
def test_each_worker_enforces_its_share(
    rps: float, burst: int, workers: int, rate: float, capacity: int
) -> None:
    assert worker_share(rule(rps=rps, burst=burst), workers) == BucketShape(rate=rate, capacity=capacity)


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("burst", [0, 1, 5, 9, 100])
def test_the_workers_together_allow_the_burst_within_workers_minus_one(workers: int, burst: int) -> None:
    together = workers * worker_share(rule(burst=burst), workers).capacity
    assert burst + 1 <= together <= burst + workers


def test_workers_sharing_a_client_evenly_let_through_the_whole_rate() -> None:
    """Requests spread round robin over 3 processes (the kernel spreads connections): over 60 s the
    total passed is rps * 60 plus the burst, within the documented tolerance of workers - 1."""
    clock = FakeClock()
    workers = [RateLimiter(workers=3, clock=clock) for _ in range(3)]
    rules = (rule(rps=4.0, burst=9),)
    passed = 0
    for step in range(60 * 100):  # 100 requests a second, for 60 s
        clock.now = 1000.0 + step / 100
        passed += passes(workers[step % 3], rules, 1)
    assert 4 * 60 + 10 - 1 <= passed <= 4 * 60 + 10 + 2


def test_the_message_names_the_limit_not_the_key() -> None:
    message = too_many_requests("main/app", rule("/api/", rps=0.5, burst=2, header="authorization"))
    assert message == (
        "too many requests to main/app under /api/: the service allows 0.5 a second (and 2 more at once) "
        "per value of its authorization header; try again later"
    )


def test_rules_are_read_from_the_configuration_json_tolerantly() -> None:
    value = [
        {"prefix": "/api/", "rps": 4, "burst": 9, "key": {"type": "header", "header": "X_User"}},
        {"rps": 1.5},
        {"rps": "fast"},
        {"prefix": "/x", "rps": 1, "key": {"type": "header"}},
        "nonsense",
    ]
    assert parse_rules(value) == (
        RateLimitRule(prefix=b"/api/", rps=4.0, burst=9, header="x-user"),
        RateLimitRule(prefix=b"/", rps=1.5, burst=0, header=None),
    )
    assert parse_rules(None) == ()
