"""A run's decision log read as a tree of spans: run → plan → task → turns, checks, merges, checkpoint waits.

Pure: events in, finished `SpanRecord`s out; no OpenTelemetry, no disk (what a turn record adds
comes through `turn_facts`). Every span is named by a key that the log fixes (a task's id, a
turn's job and dispatch time, the sequence number of a check's line), so reading the same log
again — an engine resumed after a crash — makes the same spans, and the exporter gives each the
same id (`telemetry.span_id_for`).

Attribute names follow OpenTelemetry's GenAI conventions where one exists (`gen_ai.agent.name`,
`gen_ai.conversation.id`, `gen_ai.request.model`, `gen_ai.usage.input_tokens`, `error.type`) and
are `agentbox.*` otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

RUN_KEY = "run"
PLAN_KEY = "plan"
ENDING_TASK_EVENTS = {"task.approve": "approved", "task.cancel": "cancelled"}
"""Task transitions after which nothing more happens to it (its span ends)."""
_CHECKPOINT_KIND = re.compile(r"\(([a-z_]+)\)")


def task_key(task_id: str) -> str:
    """The key of a task's span."""
    return f"task:{task_id}"


def turn_key(job_id: str, started: float) -> str:
    """The key of a turn's span: its job and the moment it was dispatched (a resumed turn is another span)."""
    return f"turn:{job_id}@{started!r}"


@dataclass
class SpanRecord:
    """One span, ended or still open."""

    key: str
    parent: str | None
    name: str
    start: float
    end: float | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    """Why the span ended in error (None: it did not)."""
    end_seq: int = 0
    """The sequence number of the log line that ended it."""


TurnFacts = Callable[[str, str, int], Mapping[str, Any] | None]
"""(role, agentbox session id, turn number) → what the session's records say of that turn."""


def _put(attributes: dict[str, Any], **values: Any) -> None:
    """Set the attributes that have a value (OpenTelemetry takes no None)."""
    for name, value in values.items():
        if value is not None and value != "":
            attributes[name.replace("__", ".")] = value


class SpanBuilder:
    """Reads a run's events in order and hands back the spans each batch ended."""

    def __init__(self, run_id: str, turn_facts: TurnFacts | None = None) -> None:
        self.run_id = run_id
        self.turn_facts = turn_facts
        self.open: dict[str, SpanRecord] = {}
        self._turn_of_job: dict[str, str] = {}
        self._plan_done = False
        self._run_ended = False
        self.run_attributes: dict[str, Any] = {}
        """Set by the caller from the run's contract (mode, goal); put on the run span when it ends."""

    # ------------------------------------------------------------------ opening and ending
    def _open(self, key: str, parent: str | None, name: str, start: float, **attributes: Any) -> SpanRecord:
        span = SpanRecord(key, parent, name, start)
        _put(span.attributes, **attributes)
        self.open[key] = span
        return span

    def _end(self, span: SpanRecord, at: float, seq: int, ended: list[SpanRecord], *, outcome: str | None = None,
             error: str | None = None) -> None:
        self.open.pop(span.key, None)
        span.end, span.end_seq = max(at, span.start), seq
        if outcome is not None:
            span.attributes["agentbox.outcome"] = outcome
        if error is not None:
            span.error = error
        ended.append(span)

    def _run(self, at: float) -> None:
        if RUN_KEY not in self.open and not self._run_ended:
            self._open(RUN_KEY, None, "run", at, agentbox__run__id=self.run_id)

    def _parent_for(self, task: str | None, kind: str | None = None) -> str:
        if task and task_key(task) in self.open:
            return task_key(task)
        if kind == "plan" and PLAN_KEY in self.open:
            return PLAN_KEY
        return RUN_KEY

    # ------------------------------------------------------------------ the log
    def feed(self, events: Iterable[Mapping[str, Any]]) -> list[SpanRecord]:
        """Take the next events in order; the spans they ended, in the order they ended."""
        ended: list[SpanRecord] = []
        for event in events:
            if event.get("run") not in (None, self.run_id):
                continue
            try:
                self._take(event, ended)
            except (TypeError, ValueError):  # a line of another shape than agentbox writes: it makes no span
                continue
        return ended

    def _take(self, event: Mapping[str, Any], ended: list[SpanRecord]) -> None:
        kind = str(event.get("type") or "")
        at = float(event.get("at") or 0.0)
        seq = int(event.get("seq") or 0)
        task = event.get("task") if isinstance(event.get("task"), str) else None
        self._run(at)  # what follows the run's end (its run_end checks, its delivery) still hangs under it
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event, at, seq, task, ended)
        elif kind.startswith("task."):
            self._task_moved(event, kind, at, seq, task, ended)

    def _dispatch(self, event: Mapping[str, Any], at: float, seq: int, task: str | None,
                  ended: list[SpanRecord]) -> None:
        job, role = str(event.get("job") or ""), str(event.get("role") or "")
        turn_kind = str(event.get("kind") or str(event.get("what") or "turn").split(" ")[0])
        started = event.get("started")
        key = turn_key(job, float(started) if isinstance(started, (int, float)) else at)
        if turn_kind == "plan" and PLAN_KEY not in self.open and not self._plan_done:
            self._open(PLAN_KEY, RUN_KEY, "plan", at, agentbox__role=role)
        self._turn_of_job[job] = key
        self._open(key, self._parent_for(task, turn_kind), f"{turn_kind} {role}", at,
                   gen_ai__operation__name="invoke_agent", gen_ai__agent__name=role, agentbox__role=role,
                   agentbox__turn__kind=turn_kind, agentbox__session__id=event.get("session"),
                   agentbox__task__id=task, agentbox__job__id=job, agentbox__attempt=event.get("attempt"),
                   agentbox__run__id=self.run_id)
        task_span = self.open.get(task_key(task)) if task else None
        if task_span is not None and turn_kind in ("work", "node"):
            task_span.attributes["agentbox.attempt"] = int(task_span.attributes.get("agentbox.attempt", 0)) + 1

    def _turn(self, event: Mapping[str, Any], at: float, seq: int, task: str | None, ended: list[SpanRecord]) -> None:
        key = self._turn_of_job.pop(str(event.get("job") or ""), None)
        span = self.open.get(key or "")
        if span is None:
            return
        role = str(span.attributes.get("agentbox.role", ""))
        session = str(event.get("session") or span.attributes.get("agentbox.session.id") or "")
        number = event.get("turn")
        facts = self.turn_facts(role, session, number) if self.turn_facts and isinstance(number, int) else None
        facts = facts or {}
        usage = facts.get("usage") if isinstance(facts.get("usage"), Mapping) else {}
        tokens = event.get("tokens")
        status = facts.get("status") or ("ok" if str(event.get("what", "")).rstrip().endswith(": ok") else "error")
        _put(span.attributes, agentbox__session__id=session, agentbox__turn__number=number,
             agentbox__profile=facts.get("profile"), agentbox__tool=facts.get("tool"),
             gen_ai__provider__name=facts.get("tool"),
             agentbox__native_session__id=facts.get("native_id"), gen_ai__conversation__id=facts.get("native_id"),
             gen_ai__request__model=facts.get("model"), gen_ai__response__model=facts.get("model"),
             gen_ai__usage__input_tokens=usage.get("input_tokens"),
             gen_ai__usage__output_tokens=usage.get("output_tokens"),
             agentbox__usage__cached_input_tokens=usage.get("cached_input_tokens"),
             agentbox__usage__reasoning_tokens=usage.get("reasoning_tokens"),
             agentbox__tokens=tokens if isinstance(tokens, int) else None,
             agentbox__cost_usd=_cost(facts, usage), agentbox__duration_s=event.get("duration_s"),
             error__type=facts.get("error_kind"))
        if tokens is None:
            span.attributes["agentbox.tokens_unknown"] = True
        self._add_to_task(task, span.attributes)
        error = str(facts.get("error") or event.get("why") or facts.get("error_kind") or "error")[:300]
        self._end(span, at, seq, ended, outcome=str(status), error=None if status == "ok" else error)

    def _add_to_task(self, task: str | None, turn: Mapping[str, Any]) -> None:
        """A turn's tokens and cost summed on its task's span."""
        span = self.open.get(task_key(task)) if task else None
        if span is None:
            return
        for name in ("agentbox.tokens", "agentbox.cost_usd"):
            if isinstance(turn.get(name), (int, float)):
                span.attributes[name] = span.attributes.get(name, 0) + turn[name]

    def _aborted(self, event: Mapping[str, Any], at: float, seq: int, task: str | None,
                 ended: list[SpanRecord]) -> None:
        key = self._turn_of_job.pop(str(event.get("job") or ""), None)
        span = self.open.get(key or "")
        if span is not None:
            self._end(span, at, seq, ended, outcome="aborted", error=str(event.get("why") or "stopped")[:300])

    def _recover(self, event: Mapping[str, Any], at: float, seq: int, task: str | None,
                 ended: list[SpanRecord]) -> None:
        """A turn a crash interrupted: its span ends here (the resumed turn is a new span)."""
        session = event.get("session")
        if not session or event.get("gate"):
            return
        for job, key in list(self._turn_of_job.items()):
            span = self.open.get(key)
            if span is not None and span.attributes.get("agentbox.session.id") == session:
                del self._turn_of_job[job]
                self._end(span, at, seq, ended, outcome="interrupted", error="the engine stopped during the turn")

    def _failure(self, event: Mapping[str, Any], at: float, seq: int, task: str | None,
                 ended: list[SpanRecord]) -> None:
        """A routed failure lands on what just failed (the turn or check ended in the same save) and its task."""
        failure = {"agentbox__failure__kind": str(event.get("what") or "").split(" ")[0],
                   "agentbox__failure__fingerprint": event.get("fingerprint")}
        session = event.get("session")
        target = next((span for span in reversed(ended) if span.attributes.get("agentbox.task.id") == task
                       and (span.key.startswith("check:") or span.attributes.get("agentbox.session.id") == session)),
                      None)
        for span in (target, self.open.get(task_key(task)) if task else None):
            if span is not None:
                _put(span.attributes, **failure)

    def _check(self, event: Mapping[str, Any], at: float, seq: int, task: str | None, ended: list[SpanRecord]) -> None:
        duration = event.get("duration_s")
        start = at - float(duration) if isinstance(duration, (int, float)) else at
        stage = event.get("stage")
        parent = self._parent_for(task) if stage != "run_end" else RUN_KEY
        span = self._open(f"check:{seq}", parent, f"check {event.get('check')}", start,
                          agentbox__check__name=event.get("check"), agentbox__check__stage=stage,
                          agentbox__check__status=event.get("status"), agentbox__check__flaky=event.get("flaky"),
                          agentbox__check__exit_status=event.get("exit_status"), agentbox__commit=event.get("commit"),
                          agentbox__task__id=task, agentbox__run__id=self.run_id)
        status = str(event.get("status") or "")
        self._end(span, at, seq, ended, outcome=status,
                  error=None if status == "passed" else str(event.get("why") or status)[:300])

    def _merge(self, event: Mapping[str, Any], at: float, seq: int, task: str | None, ended: list[SpanRecord]) -> None:
        span = self._open(f"merge:{seq}", self._parent_for(task), "merge", at, agentbox__task__id=task,
                          agentbox__commit=event.get("commit"), agentbox__run__id=self.run_id)
        self._end(span, at, seq, ended, outcome="merged")

    def _merge_trouble(self, event: Mapping[str, Any], at: float, seq: int, task: str | None,
                       ended: list[SpanRecord]) -> None:
        kind = str(event.get("type"))
        span = self._open(f"merge:{seq}", self._parent_for(task), "merge", at, agentbox__task__id=task,
                          agentbox__run__id=self.run_id)
        outcome = "conflict" if kind == "merge.conflict" else "undone"
        self._end(span, at, seq, ended, outcome=outcome, error=str(event.get("what") or outcome)[:300])

    def _checkpoint(self, event: Mapping[str, Any], at: float, seq: int, task: str | None,
                    ended: list[SpanRecord]) -> None:
        cp = str(event.get("checkpoint") or "")
        found = _CHECKPOINT_KIND.search(str(event.get("what") or ""))
        kind = found.group(1) if found else "checkpoint"
        parent = self._parent_for(task, "plan" if kind == "plan_approval" else None)
        self._open(f"checkpoint:{cp}", parent, f"checkpoint wait {kind}", at, agentbox__checkpoint__id=cp,
                   agentbox__checkpoint__kind=kind, agentbox__task__id=task, agentbox__role=event.get("role"),
                   agentbox__run__id=self.run_id)

    def _answered(self, event: Mapping[str, Any], at: float, seq: int, task: str | None,
                  ended: list[SpanRecord]) -> None:
        span = self.open.get(f"checkpoint:{event.get('checkpoint')}")
        if span is not None:
            self._end(span, at, seq, ended, outcome="answered")

    def _plan(self, event: Mapping[str, Any], at: float, seq: int, task: str | None, ended: list[SpanRecord]) -> None:
        span = self.open.get(PLAN_KEY)
        if span is not None:
            span.attributes["agentbox.plan.accepted"] = str(event.get("what") or "")[:200]

    def _task_created(self, event: Mapping[str, Any], at: float, seq: int, task: str | None,
                      ended: list[SpanRecord]) -> None:
        if not task:
            return
        parent = PLAN_KEY if PLAN_KEY in self.open else RUN_KEY
        self._open(task_key(task), parent, f"task {task}", at, agentbox__task__id=task,
                   agentbox__role=event.get("role"), agentbox__run__id=self.run_id)
        plan = self.open.get(PLAN_KEY)
        if plan is not None and "agentbox.plan.accepted" in plan.attributes:
            self._plan_done = True  # the plan was released: its span ends as its first task is made
            self._end(plan, at, seq, ended, outcome="released")

    def _task_moved(self, event: Mapping[str, Any], kind: str, at: float, seq: int, task: str | None,
                    ended: list[SpanRecord]) -> None:
        span = self.open.get(task_key(task)) if task else None
        if span is None:
            return
        state = str(event.get("what") or "").rpartition("→ ")[2].strip()
        if state:
            span.attributes["agentbox.task.state"] = state
        if kind == "task.reject":
            span.attributes["agentbox.task.reworks"] = int(span.attributes.get("agentbox.task.reworks", 0)) + 1
        outcome = ENDING_TASK_EVENTS.get(kind)
        if outcome is not None:
            self._end(span, at, seq, ended, outcome=outcome)

    def _finished(self, event: Mapping[str, Any], at: float, seq: int, task: str | None,
                  ended: list[SpanRecord]) -> None:
        status = str(event.get("what") or "run ended").rpartition(" ")[2]
        for span in sorted(self.open.values(), key=lambda s: s.key == RUN_KEY):
            if span.key == RUN_KEY:
                _put(span.attributes, **{k.replace(".", "__"): v for k, v in self.run_attributes.items()})
                self._end(span, at, seq, ended, outcome=status,
                          error=None if status == "done" else str(event.get("why") or status)[:300])
            else:
                self._end(span, at, seq, ended, outcome="unfinished")
        self._run_ended = True


def _cost(facts: Mapping[str, Any], usage: Mapping[str, Any]) -> float | None:
    """The turn's cost when its record knows one (a tool's own figure, or a priced one)."""
    for value in (facts.get("cost_usd"), usage.get("cost_usd")):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


_HANDLERS: dict[str, Callable[..., None]] = {
    "dispatch": SpanBuilder._dispatch, "turn": SpanBuilder._turn, "turn.aborted": SpanBuilder._aborted,
    "recover": SpanBuilder._recover, "failure": SpanBuilder._failure, "check": SpanBuilder._check,
    "merge": SpanBuilder._merge, "merge.conflict": SpanBuilder._merge_trouble, "merge.undone": SpanBuilder._merge_trouble,
    "checkpoint": SpanBuilder._checkpoint, "checkpoint.answered": SpanBuilder._answered, "plan": SpanBuilder._plan,
    "task.created": SpanBuilder._task_created, "run.finished": SpanBuilder._finished,
}
