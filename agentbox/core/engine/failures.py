"""Typed failures, their fingerprints, the environment backoff and the retry ledger.

Every failure gets a kind, and the kind decides its route:

    environment_failure    spawn error, timeout, killed, tool unreachable → retried with
                           backoff 1 s / 4 s / 16 s plus jitter, at most 5 minutes;
                           not counted against the task
    implementation_defect  the review rejected the work → rework with the verdict
    contract_defect        invalid structured reply or plan → back to the planner
    domain_gap             the agent needs a human decision → a checkpoint

A fingerprint (kind + files + normalised message) names the root cause: the same
fingerprint is retried automatically at most `max_auto_retries` times, then a human
decides. Normalisation erases what changes from run to run (line numbers, absolute
paths, timestamps, ids, pids, durations) and keeps what names the bug.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from agentbox.core.errors import UsageError


class FailureKind(StrEnum):
    """The four failure types; the value is what run.json and events.jsonl store."""

    ENVIRONMENT_FAILURE = "environment_failure"
    """The machinery failed (spawn, timeout, kill, tool error): retry, the work is not at fault."""
    IMPLEMENTATION_DEFECT = "implementation_defect"
    """The work does not meet its acceptance criteria: rework."""
    CONTRACT_DEFECT = "contract_defect"
    """A structured reply or plan is invalid: back to whoever produced it."""
    DOMAIN_GAP = "domain_gap"
    """The agent needs a decision only a human can make: ask."""


class FailureRoute(StrEnum):
    """What the engine does with a failure of a given kind."""

    RETRY_WITH_BACKOFF = "retry_with_backoff"
    """Run the same turn again after a backoff delay."""
    REWORK = "rework"
    """Send the verdict back to the worker's session."""
    REPLAN = "replan"
    """Send the reasons back to the planner (or the agent that replied)."""
    ASK_HUMAN = "ask_human"
    """Open a checkpoint and wait for a person."""


ROUTES: Mapping[FailureKind, FailureRoute] = {
    FailureKind.ENVIRONMENT_FAILURE: FailureRoute.RETRY_WITH_BACKOFF,
    FailureKind.IMPLEMENTATION_DEFECT: FailureRoute.REWORK,
    FailureKind.CONTRACT_DEFECT: FailureRoute.REPLAN,
    FailureKind.DOMAIN_GAP: FailureRoute.ASK_HUMAN,
}
"""The route of each failure kind."""

_INVOKE_ERROR_KINDS: Mapping[str, FailureKind] = {
    "spawn_failed": FailureKind.ENVIRONMENT_FAILURE,
    "timeout": FailureKind.ENVIRONMENT_FAILURE,
    "killed": FailureKind.ENVIRONMENT_FAILURE,
    "nonzero_exit": FailureKind.ENVIRONMENT_FAILURE,
    "tool_error": FailureKind.ENVIRONMENT_FAILURE,
    "parse_error": FailureKind.CONTRACT_DEFECT,
}


def _kind(value: FailureKind | str) -> FailureKind:
    """`value` as a FailureKind, or UsageError naming the known kinds."""
    try:
        return FailureKind(value)
    except ValueError:
        raise UsageError(
            f"unknown failure kind {value!r}; known kinds: {', '.join(FailureKind)}"
        ) from None


def classify_invoke_error(error_kind: str) -> FailureKind:
    """The failure kind of an invoke result's `error_kind`.

    Process-level errors are environment failures; output that cannot be parsed is a
    contract defect (the agent did not honour the output contract).
    """
    try:
        return _INVOKE_ERROR_KINDS[error_kind]
    except KeyError:
        known = ", ".join(_INVOKE_ERROR_KINDS)
        raise UsageError(f"unknown invoke error kind {error_kind!r}; known: {known}") from None


def route(kind: FailureKind | str) -> FailureRoute:
    """What the engine does with a failure of `kind`."""
    return ROUTES[_kind(kind)]


def counts_against_task(kind: FailureKind | str) -> bool:
    """False for environment failures: they are retried with backoff, not charged to the task."""
    return _kind(kind) is not FailureKind.ENVIRONMENT_FAILURE


# ------------------------------------------------------------------------- normalisation


@dataclass(frozen=True)
class NormalisationRule:
    """One rewrite applied by `normalise`, with the reason it exists."""

    name: str
    """Short name, used in test ids and docs."""
    pattern: re.Pattern[str]
    """What to find."""
    replacement: str | Callable[[re.Match[str]], str]
    """What to put instead (a `re.sub` replacement)."""
    why: str
    """What varies between two occurrences of the same root cause that this erases."""


_SEG = r"[^\s/\\'\"`:,;()\[\]{}<>|=*?]+"


def _keep_basename(match: re.Match[str]) -> str:
    """`<path>/` plus the basename, with sentence punctuation left outside."""
    base = match.group("base")
    stripped = base.rstrip(".")
    return f"<path>/{stripped}{base[len(stripped):]}"


def _rule(name: str, pattern: str, replacement: str | Callable[[re.Match[str]], str], why: str,
          flags: int = 0) -> NormalisationRule:
    """Compile one rule."""
    return NormalisationRule(name, re.compile(pattern, flags), replacement, why)


NORMALISATION_RULES: Sequence[NormalisationRule] = (
    _rule("posix_path", rf"(?<![\w.~/\\-])(?:~(?:/{_SEG})*|(?:/{_SEG})+)/(?P<base>{_SEG})",
          _keep_basename,
          "absolute paths differ per machine and temp dir; the basename still names the file"),
    _rule("windows_path", rf"(?<![\w])[A-Za-z]:\\(?:{_SEG}\\)*(?P<base>{_SEG})", _keep_basename,
          "the same for drive-letter paths"),
    _rule("uuid", r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
          "<uuid>", "session, run and request ids are fresh every time"),
    _rule("iso_datetime",
          r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b",
          "<time>", "timestamps in log lines"),
    _rule("compact_datetime", r"\b\d{8}[T_-]?\d{6}(?:-[0-9a-f]{4,8})?\b", "<time>",
          "compact stamps, with the random suffix of a run id (`run-20261129-170512-a1b2`)"),
    _rule("date", r"\b\d{4}[-/.]\d{2}[-/.]\d{2}\b", "<date>", "dates on their own"),
    _rule("clock_time", r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b", "<time>",
          "times of day, `HH:MM:SS(.fff)`"),
    _rule("host_port", r"\b(localhost|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]):\d{1,5}\b",
          r"\1:<port>", "ephemeral ports of local servers"),
    _rule("file_line", r"(\.[A-Za-z0-9]+):\d+(?::\d+)?", r"\1:<line>",
          "`file.py:12:5` positions move with every edit above the failure"),
    _rule("file_paren_line", r"(\.[A-Za-z0-9]+)\(\d+(?:,\s*\d+)?\)", r"\1(<line>)",
          "`file.ts(12,5)` positions, the TypeScript/MSBuild spelling"),
    _rule("line_word", r"\b(lines?|ln|col|column)(\s*[:#]?\s*)\d+(?:\s*[-–]\s*\d+)?",
          r"\1\2<n>", "`line 12`, `column 5`, `lines 3-7` in tracebacks and linters",
          re.IGNORECASE),
    _rule("line_anchor", r"(?<![A-Za-z0-9_])L\d+(?:[-–]L?\d+)?\b", "L<n>",
          "`L12` / `#L12-L14` anchors"),
    _rule("epoch", r"\b\d{10}(?:\d{3})?(?:\.\d+)?\b", "<epoch>",
          "Unix times in seconds (10 digits) or milliseconds (13 digits)"),
    _rule("hex_prefixed", r"\b0x[0-9a-fA-F]+\b", "<hex>", "memory addresses and handles"),
    _rule("hex_id", r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,}\b", "<hex>",
          "commit hashes, object ids, digests: 7+ hex chars mixing digits and letters "
          "(plain words such as `decade` and plain numbers are kept)"),
    _rule("pid_like", r"\b(pid|tid|port|process|thread|worker|job|attempt|retry|try)(\s*[:=#]?\s*)\d+",
          r"\1\2<n>", "process ids, ports and attempt counters after their keyword",
          re.IGNORECASE),
    _rule("duration",
          r"\b\d+(?:\.\d+)?(?:(?:ms|us|µs|ns|s|h)|\s?(?:secs?|seconds?|mins?|minutes?|hours?))\b",
          "<duration>", "how long something took or waited (`1.23s`, `150ms`, `3 seconds`)"),
    _rule("whitespace", r"\s+", " ", "reflowed or indented output"),
)
"""The rewrites `normalise` applies, in order. Paths go first (they may contain dates and
ids that belong to the directory, not the bug); whitespace goes last. Plain numbers that
no rule names are kept: in an assertion (`expected 3, got 4`) they are the point."""


def normalise(message: str) -> str:
    """`message` with run-specific noise replaced by placeholders; case is kept.

    Two failures with the same root cause on different machines, runs or edits normalise
    to the same text; different error text or different files stay different.
    """
    text = message
    for rule in NORMALISATION_RULES:
        text = rule.pattern.sub(rule.replacement, text)
    return text.strip()


def normalise_file(path: str) -> str:
    """A file name as it enters a fingerprint: relative paths cleaned, absolute ones reduced.

    `./src//app.py` → `src/app.py`; `/tmp/x/src/app.py` → `<path>/app.py` (like `normalise`);
    backslashes become slashes.
    """
    text = path.strip().replace("\\", "/")
    if not text:
        return ""
    if text.startswith(("/", "~")) or re.match(r"^[A-Za-z]:/", text):
        return f"<path>/{posixpath.basename(text.rstrip('/'))}"
    return posixpath.normpath(text)


def fingerprint(kind: FailureKind | str, message: str, files: Iterable[str] = ()) -> str:
    """16 hex chars naming a root cause: sha256 of kind, sorted normalised files, normalised message.

    Stable across runs and machines, so the retry ledger can count the same cause twice.
    """
    normalised_files = sorted({name for name in map(normalise_file, files) if name})
    payload = json.dumps(
        {"kind": str(_kind(kind)), "files": normalised_files, "message": normalise(message)},
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


# ----------------------------------------------------------------------------- backoff

BACKOFF_BASES_S: tuple[float, ...] = (1.0, 4.0, 16.0)
"""Base delays of the environment retries (1 s, 4 s, 16 s)."""

BACKOFF_JITTER = 0.2
"""Each delay is scaled by a random factor in [1 - jitter, 1 + jitter] so retries spread out."""

ENVIRONMENT_RETRY_BUDGET_S = 300.0
"""At most five minutes of waiting per task for environment retries."""


def backoff_delays(
    max_total_s: float = ENVIRONMENT_RETRY_BUDGET_S,
    rng: random.Random | None = None,
    *,
    bases: Sequence[float] = BACKOFF_BASES_S,
    jitter: float = BACKOFF_JITTER,
) -> list[float]:
    """The waits before each environment retry: `bases` with ±`jitter`, summing to ≤ `max_total_s`.

    The list is cut before the first delay that would push the total over the cap, so its
    length is the number of retries left; pass a seeded `rng` for reproducible delays.
    """
    if max_total_s < 0 or not 0 <= jitter < 1:
        raise UsageError(f"invalid backoff: max_total_s={max_total_s}, jitter={jitter}")
    source = rng if rng is not None else random.Random()
    delays: list[float] = []
    total = 0.0
    for base in bases:
        delay = base * source.uniform(1 - jitter, 1 + jitter)
        if total + delay > max_total_s:
            break
        delays.append(delay)
        total += delay
    return delays


# ------------------------------------------------------------------------ retry ledger


@dataclass
class RetryLedger:
    """How many times each fingerprint has failed in a run; serialises into run.json.

    Protocol, on every counted failure: `record(fp)` first, then `exhausted(fp, max)`.
    With `max_auto_retries=2` the 1st and 2nd failures are retried and the 3rd escalates
    to a human: a fingerprint is retried at most `max_auto_retries` times.
    """

    counts: dict[str, int] = field(default_factory=dict)
    """Failures seen per fingerprint, including the one being handled."""

    def record(self, fp: str) -> int:
        """Count one more failure of `fp` and return how many there have been."""
        self.counts[fp] = self.counts.get(fp, 0) + 1
        return self.counts[fp]

    def count(self, fp: str) -> int:
        """How many failures of `fp` have been recorded (0 when never)."""
        return self.counts.get(fp, 0)

    def retries_done(self, fp: str) -> int:
        """How many automatic retries `fp` has had: every recorded failure but the latest."""
        return max(self.count(fp) - 1, 0)

    def exhausted(self, fp: str, max_auto_retries: int) -> bool:
        """True when `fp` was already retried `max_auto_retries` times: escalate, don't retry.

        Call after `record(fp)` for the failure at hand; equivalent to
        `count(fp) > max_auto_retries`.
        """
        if max_auto_retries < 0:
            raise UsageError(f"max_auto_retries must be >= 0, not {max_auto_retries}")
        return self.count(fp) > max_auto_retries

    def reset(self, fp: str) -> None:
        """Forget `fp`, e.g. after a human fixed the cause and asked for a fresh start."""
        self.counts.pop(fp, None)

    def to_dict(self) -> dict[str, int]:
        """The ledger as a plain mapping for run.json."""
        return dict(self.counts)

    @classmethod
    def from_dict(cls, data: Mapping[str, int] | None) -> RetryLedger:
        """A ledger read back from run.json (None or {} gives an empty one)."""
        return cls({str(fp): int(n) for fp, n in (data or {}).items()})
