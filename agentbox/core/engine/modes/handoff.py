"""Handoff mode (Swarm style): the active role answers, or hands the conversation on.

The start role (`handoff.start`, default: the first role) gets the goal. Each turn is a
job of kind `handoff` in the role's own session (`session_key handoff:<role>`), with the
role's write scope, and answers with a `Handoff` reply: `answer` ends the run with its
message as the final answer; `handoff` passes the conversation to another role with a
message, which that role receives together with the trail of handoffs so far.

Two hard bounds, enforced here and not left to the agents:

- `max_handoffs`: the run may route at most this many handoffs. A handoff beyond it is
  not routed: the run ends **failed** (`result.terminated_by: max_handoffs`), with the
  trail as `artifacts/transcript.md`. The last role is told when no handoff is left, so
  a well-behaved agent answers instead. Ending (rather than asking) keeps the bound a
  hard limit, as `max_rounds` is for group chat; the human can start a new run.
- `max_ping_pong`: consecutive handoffs back and forth between the same two roles. One
  more than the bound opens a `ping_pong` checkpoint instead of a loop. The answer
  `stop` (or `cancel`) ends the run cancelled; a role name re-routes the handoff to that
  role (the rest of the answer is its note); `continue` routes it as the agent asked
  (the rest of the answer is a note for the target), and any other text does the same
  with the whole text as the note. Either way the ping-pong count starts again from zero.
"""

from __future__ import annotations

from typing import Any, Literal

from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.config.models import HandoffSettings
from agentbox.core.engine import mode_prompts
from agentbox.core.engine.mode_state import HandoffAnswer, HandoffEnding, HandoffHop, HandoffState
from agentbox.core.engine.models import (
    TERMINAL_RUN_STATES,
    Checkpoint,
    CheckpointData,
    Job,
    JobData,
    RunResult,
    Task,
)
from agentbox.core.engine.modes.base import ModeDriver
from agentbox.core.engine.replies import Handoff

STOP_WORDS = {"stop", "cancel", "no", "end"}
CONTINUE_WORDS = {"continue", "yes", "y", "ok", "go", "retry"}


class HandoffMode(ModeDriver[HandoffState]):
    """One active role at a time; answer or hand off, under the handoff bounds."""

    name = "handoff"
    state_model = HandoffState

    @property
    def settings(self) -> HandoffSettings:
        """The run's handoff settings."""
        return self.run.contract.settings_as(HandoffSettings)

    @property
    def max_handoffs(self) -> int:
        """Most handoffs routed in this run."""
        return self.settings.max_handoffs

    @property
    def max_ping_pong(self) -> int:
        """Most consecutive handoffs between the same two roles before asking the human."""
        return self.settings.max_ping_pong

    def reviewer_for(self, task: Task) -> str:
        """Handoffs have no tasks to review."""
        return task.assignee

    def _roles(self) -> dict[str, str]:
        return {name: role.description or role.profile for name, role in self.ctx.crew.roles.items()}

    # ------------------------------------------------------------------ hooks
    def start(self) -> None:
        """Give the goal to the start role."""
        roles = list(self.ctx.crew.roles)
        first = self.settings.start or roles[0]
        if first not in roles:
            self.ctx.ledger.finish("failed", f"handoff cannot start: unknown start role {first!r}")
            return
        self.update_state(phase="active", hop=0, active=first, trail=[], ping_pong=0)
        self._ask(first, None, None)

    def _ask(self, role: str, message: str | None, note: str | None) -> None:
        hop = self.state.hop
        prompt = mode_prompts.handoff_prompt(self.run, role, hop=hop, roles=self._roles(), trail=self.state.trail,
                                             message=message, note=note,
                                             handoffs_left=self.max_handoffs - hop)
        writes = self.ctx.crew.roles[role].writes
        self.update_state(active=role)
        self.ctx.ledger.enqueue("handoff", role, prompt, data=JobData(
            session_key=f"handoff:{role}", original_prompt=prompt, hop=hop,
            writes=["**"] if writes is None else list(writes)))

    def _check(self, role: str) -> Any:
        def check(reply: Handoff) -> list[str]:
            if reply.action != "handoff":
                return []
            others = [r for r in self.ctx.crew.roles if r != role]
            if reply.to not in others:
                return [f"to: hand over to another role of the crew, one of: {', '.join(others)} (got {reply.to!r})"]
            return []
        return check

    def on_success(self, job: Job, result: InvokeResult) -> None:
        """An answer ends the run; a handoff is routed, refused at the bound, or held for the human."""
        if job.kind != "handoff" or self.state.phase != "active":
            return
        if job.data.hop != self.state.hop:
            self.ctx.ledger.event("handoff.stale", f"late turn of {job.role} ignored", None, role=job.role)
            return
        reply = self.ctx.structured(job, result, Handoff, self._check(job.role))
        if reply is None:
            return
        if reply.action == "answer":
            self.ctx.ledger.event("answer", f"{job.role} answered after {self.state.hop} handoff(s)",
                              reply.message[:300], role=job.role, session=result.session_id)
            self._end("done", "answer", f"{job.role} answered", HandoffAnswer(role=job.role, message=reply.message))
            return
        target = str(reply.to)
        hop = HandoffHop(source=job.role, to=target, message=reply.message, hop=self.state.hop + 1)
        if self.state.hop >= self.max_handoffs:
            self.ctx.ledger.event("handoff.refused", f"{job.role} → {target} refused: {self.max_handoffs} handoff(s) "
                              "used", reply.message[:300], role=job.role, human_required=False)
            self._end("failed", "max_handoffs", f"max_handoffs ({self.max_handoffs}) reached without an answer",
                      None, last=hop)
            return
        streak = self._streak(job.role, target)
        if streak > self.max_ping_pong:
            self.update_state(held=hop)
            self.ctx.ledger.checkpoint(
                "ping_pong",
                f"{job.role} and {target} have handed the conversation back and forth {streak - 1} times "
                f"(limit {self.max_ping_pong}). {job.role} now hands off to {target}: {reply.message[:300]}\n"
                f"Answer 'continue' (optionally with a note for {target}), a role name to hand over to "
                "that role instead, or 'stop'.",
                options=["continue", "stop"], role=job.role, data=CheckpointData(hop=hop))
            return
        self._route(hop, streak, None)

    def _streak(self, source: str, target: str) -> int:
        """The ping-pong count this handoff would make: consecutive handoffs within one pair."""
        trail = self.state.trail
        if trail and {trail[-1].source, trail[-1].to} == {source, target}:
            return self.state.ping_pong + 1
        return 1

    def _route(self, hop: HandoffHop, streak: int, note: str | None) -> None:
        if note:
            hop = hop.model_copy(update={"note": note})
        self.update_state(trail=[*self.state.trail, hop], hop=hop.hop, ping_pong=streak)
        self.ctx.ledger.event("handoff", f"{hop.source} → {hop.to} (handoff {hop.hop}/{self.max_handoffs})",
                          hop.message[:300], role=hop.source, to=hop.to, hop=hop.hop)
        self._ask(hop.to, hop.message, note)

    def on_answer(self, checkpoint: Checkpoint, text: str) -> None:
        """The human's answer to a ping-pong: stop, re-route, or continue with a note."""
        if checkpoint.kind != "ping_pong" or self.state.phase != "active":
            return
        hop = self.state.held or checkpoint.data.hop
        if hop is None:
            return
        self.update_state(held=None)
        words = text.split()
        first = words[0].lower()
        if first in STOP_WORDS:
            self._end("cancelled", "human", f"stopped by the human at {checkpoint.id} (ping-pong)", None, last=hop)
            return
        if words[0] in self.ctx.crew.roles and words[0] != hop.source:
            hop, note = hop.model_copy(update={"to": words[0]}), " ".join(words[1:]) or None
        elif first in CONTINUE_WORDS:
            note = " ".join(words[1:]) or None
        else:
            note = text
        if self.state.hop >= self.max_handoffs:
            self._end("failed", "max_handoffs", f"max_handoffs ({self.max_handoffs}) reached without an answer",
                      None, last=hop)
            return
        self._route(hop, 0, note)

    def _end(self, status: Literal["done", "failed", "cancelled"],
             terminated_by: Literal["answer", "max_handoffs", "human"], why: str, final: HandoffAnswer | None,
             last: HandoffHop | None = None) -> None:
        ended = HandoffEnding(status=status, terminated_by=terminated_by, why=why, final=final, last=last)
        self.update_state(phase="ended", ended=ended)
        self._finalize(ended)

    def _finalize(self, ended: HandoffEnding) -> None:
        """Write the answer and the transcript as artifacts, finish the run."""
        final, last = ended.final, ended.last
        trail = [*self.state.trail, *([last.model_copy(update={"note": "not routed"})] if last else [])]
        transcript = self.write_artifact("transcript.md", mode_prompts.handoff_transcript(self.run, trail, final, ended.why),
                                         role="engine", what="transcript.md of the handoff run")
        if final is not None:
            final_path = self.write_artifact(
                "final.md", f"# Answer\n\n{final.message.strip()}\n\n"
                f"_{final.role}, after {self.state.hop} handoff(s)_\n",
                role=final.role, what="final.md of the handoff run")
            summary, artifact, answered_by = final.message, str(final_path), final.role
        else:
            summary, artifact, answered_by = (last.message if last else ""), str(transcript), None
        self.ctx.ledger.finish(ended.status, ended.why, RunResult(
            summary=summary.strip()[:4000], artifact=artifact, transcript=str(transcript),
            terminated_by=ended.terminated_by, handoffs=self.state.hop, answered_by=answered_by))

    def tick(self) -> None:
        """Finish an ended run; fail one whose next turn was cancelled."""
        phase, ended = self.state.phase, self.state.ended
        if phase == "ended" and ended is not None and self.run.status not in TERMINAL_RUN_STATES:
            self._finalize(ended)
        elif phase == "active" and not self.run.jobs and not self.run.open_checkpoints():
            self.ctx.ledger.finish("failed", "the handoff cannot go on: the next turn was cancelled")
