"""Failure kinds, message normalisation, fingerprints, backoff and the retry ledger."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from agentbox.core.engine.failures import (
    BACKOFF_BASES_S,
    NORMALISATION_RULES,
    FailureKind,
    FailureRoute,
    RetryLedger,
    backoff_delays,
    classify_invoke_error,
    counts_against_task,
    fingerprint,
    normalise,
    normalise_file,
    route,
)
from agentbox.core.errors import UsageError

K = FailureKind

# ----------------------------------------------------------------------------- kinds


@pytest.mark.parametrize(
    ("error_kind", "expected"),
    [
        ("spawn_failed", K.ENVIRONMENT_FAILURE),
        ("timeout", K.ENVIRONMENT_FAILURE),
        ("killed", K.ENVIRONMENT_FAILURE),
        ("nonzero_exit", K.ENVIRONMENT_FAILURE),
        ("tool_error", K.ENVIRONMENT_FAILURE),
        ("parse_error", K.CONTRACT_DEFECT),
    ],
)
def test_classify_invoke_error(error_kind: str, expected: FailureKind) -> None:
    assert classify_invoke_error(error_kind) is expected


def test_classify_unknown_invoke_error_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown invoke error kind 'exploded'"):
        classify_invoke_error("exploded")


def test_routes_and_counting() -> None:
    assert route("environment_failure") is FailureRoute.RETRY_WITH_BACKOFF
    assert route(K.IMPLEMENTATION_DEFECT) is FailureRoute.REWORK
    assert route(K.CONTRACT_DEFECT) is FailureRoute.REPLAN
    assert route(K.DOMAIN_GAP) is FailureRoute.ASK_HUMAN
    assert not counts_against_task(K.ENVIRONMENT_FAILURE)
    assert all(counts_against_task(kind) for kind in K if kind is not K.ENVIRONMENT_FAILURE)
    with pytest.raises(UsageError, match="unknown failure kind"):
        route("flaky")


# --------------------------------------------------------------------- normalisation

SAME: list[tuple[str, str, str]] = [
    ("line_numbers", "src/app.py:12:5: E501 line too long", "src/app.py:40:1: E501 line too long"),
    ("line_only", "app.py:7: SyntaxError", "app.py:1203: SyntaxError"),
    ("traceback_line", 'File "app.py", line 12, in main', 'File "app.py", line 99, in main'),
    ("column_word", "error at line 3, column 5", "error at line 30, column 15"),
    ("line_range", "lines 3-7 differ", "lines 10 - 12 differ"),
    ("line_anchor", "see app.py#L12-L14", "see app.py#L2"),
    ("paren_position", "src/app.ts(12,5): error TS2304", "src/app.ts(80,1): error TS2304"),
    ("abs_path", "cannot open /tmp/x/src/app.py", "cannot open /home/bob/work/app.py"),
    ("abs_path_with_line", "/tmp/a1/src/app.py:3:1: F401", "/var/b/app.py:99:4: F401"),
    ("home_path", "read ~/proj/app.py", "read /root/elsewhere/app.py"),
    ("windows_path", r"C:\Users\bob\proj\app.py failed", "/srv/proj/app.py failed"),
    ("quoted_path", 'File "/usr/lib/python3.11/json/decoder.py", line 355',
     'File "/opt/py/lib/json/decoder.py", line 12'),
    ("iso_datetime", "2024-01-02T03:04:05.123Z ERROR boom", "2025-11-29T17:05:12+01:00 ERROR boom"),
    ("iso_space", "at 2024-01-02 03:04:05 failed", "at 2026-12-31 23:59:59,999 failed"),
    ("date", "report of 2024-01-02 is stale", "report of 2025/12/31 is stale"),
    ("clock", "[12:30:45] connection reset", "[09:01:02.345] connection reset"),
    ("epoch_seconds", "expired at 1700000000", "expired at 1712345678"),
    ("epoch_millis", "ts=1700000000123 rejected", "ts=1712345678901 rejected"),
    ("uuid", "session 3f2a1b4c-1234-4abc-9def-0123456789ab lost",
     "session 00000000-aaaa-4bbb-8ccc-dddddddddddd lost"),
    ("hex_address", "<object at 0x7f3a2b1c4d50>", "<object at 0xdeadbeef>"),
    ("hex_id", "commit a1b2c3d4e5 not found", "commit 9f8e7d6 not found"),
    ("digest", "sha256 mismatch: 3b5d5c3712955042212316173ccf37be8",
     "sha256 mismatch: e3b0c44298fc1c149afbf4c8996fb92427ae41e4"),
    ("pid", "pid 1234 killed", "pid 98 killed"),
    ("pid_equals", "worker exited (pid=4242, port=8080)", "worker exited (pid=17, port=51234)"),
    ("host_port", "connect 127.0.0.1:41234 refused", "connect 127.0.0.1:8080 refused"),
    ("localhost_port", "GET http://localhost:5173/api failed", "GET http://localhost:3000/api failed"),
    ("attempt", "attempt 1 timed out", "attempt 3 timed out"),
    ("duration_s", "timed out after 1.23s", "timed out after 900s"),
    ("duration_ms", "slow: 150ms", "slow: 2ms"),
    ("duration_words", "waited 3 seconds", "waited 120 seconds"),
    ("run_id", "run-20261129-170512-a1b2 failed", "run-20250101-000000-ffee failed"),
    ("whitespace", "assert  x ==\n    y", "assert x == y"),
    ("trailing_dot", "see /tmp/x/app.py.", "see /a/b/app.py."),
]

DIFFERENT: list[tuple[str, str, str]] = [
    ("error_text", "KeyError: 'name'", "KeyError: 'email'"),
    ("exception_type", "ValueError: bad input", "TypeError: bad input"),
    ("basename", "cannot open /tmp/x/app.py", "cannot open /tmp/x/models.py"),
    ("relative_path", "src/app.py:3: F401", "tests/app.py:3: F401"),
    ("assert_values", "expected 3, got 4", "expected 3, got 5"),
    ("case_kept", "Error: Missing field", "error: missing field"),
    ("short_numbers", "exit code 1", "exit code 2"),
    ("non_hex_word", "decade passed", "facade passed"),
    ("url_path", "GET https://example.com/api/v1 failed", "GET https://example.com/api/v2 failed"),
    ("status_code", "HTTP 503 from server", "HTTP 404 from server"),
]


@pytest.mark.parametrize(("name", "left", "right"), SAME, ids=[case[0] for case in SAME])
def test_same_root_cause_normalises_the_same(name: str, left: str, right: str) -> None:
    assert normalise(left) == normalise(right)


@pytest.mark.parametrize(("name", "left", "right"), DIFFERENT, ids=[case[0] for case in DIFFERENT])
def test_different_causes_stay_different(name: str, left: str, right: str) -> None:
    assert normalise(left) != normalise(right)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ('Traceback: File "/home/u/proj/src/app.py", line 12, in main',
         'Traceback: File "<path>/app.py", line <n>, in main'),
        ("error at /tmp/t/src/app.py:12:5: E501", "error at <path>/app.py:<line>: E501"),
        ("2024-01-02T03:04:05Z conn refused 127.0.0.1:41234",
         "<time> conn refused 127.0.0.1:<port>"),
        ("pid 1234 killed after 1.23s (attempt 3)",
         "pid <n> killed after <duration> (attempt <n>)"),
        ("object at 0x7f3a, commit a1b2c3d4e5", "object at <hex>, commit <hex>"),
        ("see /tmp/x/app.py.", "see <path>/app.py."),
        ("  spaced \n\t out  ", "spaced out"),
        ("https://example.com/api/v1 returned 503", "https://example.com/api/v1 returned 503"),
    ],
)
def test_normalised_text(message: str, expected: str) -> None:
    assert normalise(message) == expected


def test_every_rule_is_documented() -> None:
    assert len({rule.name for rule in NORMALISATION_RULES}) == len(NORMALISATION_RULES)
    assert all(rule.why for rule in NORMALISATION_RULES)


def test_normalise_is_idempotent() -> None:
    for _, left, right in SAME + DIFFERENT:
        for message in (left, right):
            assert normalise(normalise(message)) == normalise(message)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("src/app.py", "src/app.py"),
        ("./src//app.py", "src/app.py"),
        ("src\\app.py", "src/app.py"),
        ("/tmp/x/src/app.py", "<path>/app.py"),
        ("C:\\proj\\app.py", "<path>/app.py"),
        ("", ""),
    ],
)
def test_normalise_file(path: str, expected: str) -> None:
    assert normalise_file(path) == expected


# ---------------------------------------------------------------------- fingerprints


def test_fingerprint_shape() -> None:
    fp = fingerprint(K.IMPLEMENTATION_DEFECT, "boom", ["src/app.py"])
    assert len(fp) == 16
    int(fp, 16)


def test_fingerprint_ignores_noise_file_order_and_duplicates() -> None:
    a = fingerprint(
        K.IMPLEMENTATION_DEFECT,
        "2024-01-02T03:04:05Z /tmp/a/src/app.py:12:5 AssertionError in session "
        "3f2a1b4c-1234-4abc-9def-0123456789ab",
        ["src/app.py", "tests/test_app.py"],
    )
    b = fingerprint(
        "implementation_defect",
        "2025-06-07T08:09:10Z /home/ci/src/app.py:40:1 AssertionError in session "
        "00000000-aaaa-4bbb-8ccc-dddddddddddd",
        ["./tests/test_app.py", "src/app.py", "src/app.py"],
    )
    assert a == b


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ((K.IMPLEMENTATION_DEFECT, "boom", ()), (K.CONTRACT_DEFECT, "boom", ())),
        ((K.IMPLEMENTATION_DEFECT, "boom", ()), (K.IMPLEMENTATION_DEFECT, "bang", ())),
        ((K.IMPLEMENTATION_DEFECT, "boom", ["src/a.py"]), (K.IMPLEMENTATION_DEFECT, "boom", ["src/b.py"])),
        ((K.IMPLEMENTATION_DEFECT, "boom", ["src/a.py"]), (K.IMPLEMENTATION_DEFECT, "boom", ())),
    ],
)
def test_fingerprint_inequality(left: tuple, right: tuple) -> None:
    assert fingerprint(*left) != fingerprint(*right)


def test_fingerprint_is_stable_across_processes() -> None:
    # A literal value: the fingerprint is persisted in run.json and must not drift.
    payload = json.dumps({"files": [], "kind": "domain_gap", "message": "which db?"}, sort_keys=True)
    assert fingerprint("domain_gap", "which  db?") == hashlib.sha256(payload.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- backoff


def test_backoff_sequence_with_jitter() -> None:
    delays = backoff_delays(rng=random.Random(7))
    assert len(delays) == 3
    for delay, base in zip(delays, BACKOFF_BASES_S, strict=True):
        assert base * 0.8 <= delay <= base * 1.2
    assert delays == backoff_delays(rng=random.Random(7))
    assert delays != backoff_delays(rng=random.Random(8))


def test_backoff_without_jitter_is_exact() -> None:
    assert backoff_delays(jitter=0) == [1.0, 4.0, 16.0]


@pytest.mark.parametrize(("cap", "count"), [(300, 3), (21, 3), (20.9, 2), (5, 2), (4.9, 1), (0.5, 0)])
def test_backoff_is_truncated_to_the_cap(cap: float, count: int) -> None:
    delays = backoff_delays(cap, jitter=0)
    assert len(delays) == count
    assert sum(delays) <= cap


def test_backoff_with_jitter_never_exceeds_the_cap() -> None:
    for seed in range(200):
        assert sum(backoff_delays(10, random.Random(seed))) <= 10
        assert sum(backoff_delays(rng=random.Random(seed))) <= 300


def test_long_schedule_stops_at_five_minutes() -> None:
    delays = backoff_delays(bases=[4.0**n for n in range(8)], jitter=0)
    assert delays == [1.0, 4.0, 16.0, 64.0]
    assert sum(delays) <= 300


def test_backoff_rejects_nonsense() -> None:
    with pytest.raises(UsageError):
        backoff_delays(-1)
    with pytest.raises(UsageError):
        backoff_delays(jitter=1.5)


# ---------------------------------------------------------------------- retry ledger


def test_ledger_with_two_retries_escalates_on_the_third_failure() -> None:
    ledger = RetryLedger()
    decisions = []
    for _ in range(3):
        ledger.record("fp1")
        decisions.append("escalate" if ledger.exhausted("fp1", 2) else "retry")
    assert decisions == ["retry", "retry", "escalate"]
    assert ledger.retries_done("fp1") == 2


def test_ledger_counts_fingerprints_separately() -> None:
    ledger = RetryLedger()
    assert ledger.record("a") == 1
    assert ledger.record("a") == 2
    assert ledger.record("b") == 1
    assert ledger.count("a") == 2 and ledger.count("b") == 1 and ledger.count("c") == 0
    assert not ledger.exhausted("b", 2)
    assert not ledger.exhausted("c", 0)


def test_zero_retries_escalates_the_first_failure() -> None:
    ledger = RetryLedger()
    ledger.record("fp")
    assert ledger.exhausted("fp", 0)
    with pytest.raises(UsageError):
        ledger.exhausted("fp", -1)


def test_ledger_round_trips_through_json_and_resets() -> None:
    ledger = RetryLedger()
    ledger.record("a")
    ledger.record("a")
    restored = RetryLedger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert restored == ledger
    assert restored.to_dict() == {"a": 2}
    restored.reset("a")
    assert restored.count("a") == 0
    assert RetryLedger.from_dict(None) == RetryLedger()
