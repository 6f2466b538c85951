"""Group chat mode: a shared message pool, a speaker rule, and two ways to end.

Every message goes to the run's pool, `chat.jsonl` (one JSON line per message, numbered
`n` from 0). A speaker's turn is a job of kind `speech` (no task) in the speaker's own
session (`session_key chat:<role>`); it is sent only the pool messages it has not seen
(`GroupChatState.seen[role]` is the first message number it has not been shown) and answers
with a `ChatTurn`.

Speaker selection:

- `round_robin`: the speakers in order; a round is one message from each.
- `lead_selects`: the lead opens every round and names the next speaker in
  `next_speaker`; that member answers, and the floor goes back to the lead, which
  starts the next round. A round is one lead message plus the answer it asked for.

The chat ends when `done_role` (default: the lead under `lead_selects`, nobody under
`round_robin`) sends `done: true` — its message is the final answer — or when
`max_rounds` rounds are over, in which case the last message is the final answer. Both
end the run `done`; `result.terminated_by` says which. Done signals from other members
are recorded but do not end the chat. The final answer and the transcript are artifacts
(`artifacts/final.md`, `artifacts/transcript.md`).

Crash safety: a message is committed in the run's state (`GroupChatState.chat_outbox`) before it is
appended to chat.jsonl, and appended only if the pool does not hold its number yet, so a
kill at any point neither loses nor repeats a message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from agentbox.core import store
from agentbox.core.agents.invoke import InvokeResult
from agentbox.core.config.models import GroupChatSettings
from agentbox.core.engine import mode_prompts
from agentbox.core.engine.mode_state import ChatEnding, ChatMessage, GroupChatState
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Job, JobData, RunResult, Task
from agentbox.core.engine.modes.base import ModeDriver
from agentbox.core.engine.replies import ChatTurn

CHAT_FILE = "chat.jsonl"


class GroupChatMode(ModeDriver[GroupChatState]):
    """Speeches into a shared pool until the done signal or the round limit."""

    name = "group_chat"
    state_model = GroupChatState

    # ------------------------------------------------------------------ pool
    @property
    def pool_path(self) -> Path:
        """The run's message pool."""
        return self.ctx.store.dir(self.run.id) / CHAT_FILE

    @property
    def settings(self) -> GroupChatSettings:
        """The run's group chat settings."""
        return self.run.contract.settings_as(GroupChatSettings)

    def _pool(self) -> list[ChatMessage]:
        """Messages already in chat.jsonl, by number, each once."""
        records, _ = store.read_jsonl(self.pool_path)
        by_n: dict[int, ChatMessage] = {}
        for record in records:
            try:
                message = ChatMessage.model_validate(record)
            except ValidationError:
                continue
            by_n.setdefault(message.n, message)
        return [by_n[n] for n in sorted(by_n)]

    def messages(self) -> list[ChatMessage]:
        """Every accepted message: the pool plus those not yet flushed to it."""
        pool = self._pool()
        known = {m.n for m in pool}
        return pool + [m for m in self.state.chat_outbox if m.n not in known]

    def _flush(self) -> None:
        """Commit the state, then append the committed messages the pool does not hold yet."""
        outbox = self.state.chat_outbox
        if not outbox:
            return
        self.ctx.save()
        pool = self._pool()
        last = pool[-1].n if pool else -1
        for message in outbox:
            if message.n > last:
                store.append_jsonl(self.pool_path, message.model_dump())
                last = message.n
        self.update_state(chat_outbox=[])

    # ------------------------------------------------------------------ settings
    def _resolve(self) -> list[str]:
        """Fill the mode state from the settings snapshot; the problems that stop the chat."""
        settings = self.settings
        roles = list(self.ctx.crew.roles)
        speakers = list(settings.speakers or roles)
        selection = settings.selection
        lead = settings.lead
        if selection == "lead_selects" and not lead:
            lead = speakers[0]
        done_role = settings.done_role or (lead if selection == "lead_selects" else None)
        problems = [f"unknown speaker {s!r} (roles: {', '.join(roles)})" for s in speakers if s not in roles]
        if selection == "lead_selects":
            if lead not in speakers:
                speakers.insert(0, lead)
            if len(speakers) < 2:
                problems.append("lead_selects needs at least one speaker besides the lead")
        self.update_state(speakers=speakers, lead=lead, done_role=done_role, count=0, round=0, seen={},
                          chat_outbox=[])
        return problems

    # ------------------------------------------------------------------ hooks
    def start(self) -> None:
        """Open the chat with the first speaker (the lead under lead_selects)."""
        problems = self._resolve()
        if problems:
            self.ctx.ledger.finish("failed", "group chat cannot start: " + "; ".join(problems))
            return
        state = self.state
        first = state.lead if self.settings.selection == "lead_selects" and state.lead else state.speakers[0]
        self.update_state(phase="chatting", round=1)
        self._ask(first)

    def reviewer_for(self, task: Task) -> str:
        """Chats have no tasks to review."""
        return task.assignee

    def _ask(self, role: str) -> None:
        state = self.state
        n = state.count
        unseen = [m for m in self.messages() if m.n >= state.seen.get(role, 0)]
        prompt = mode_prompts.speech_prompt(
            self.run, role, n=n, round_no=state.round, max_rounds=self.settings.max_rounds,
            speakers=state.speakers, selection=self.settings.selection, lead=state.lead,
            done_role=state.done_role, unseen=unseen, first_turn=role not in state.seen)
        self.ctx.ledger.enqueue("speech", role, prompt, data=JobData(
            session_key=f"chat:{role}", original_prompt=prompt, n=n, round=state.round))

    def _check(self, role: str) -> Any:
        def check(turn: ChatTurn) -> list[str]:
            lead = self.state.lead
            if self.settings.selection != "lead_selects" or role != lead:
                return []
            if turn.done and role == self.state.done_role:
                return []
            others = [s for s in self.state.speakers if s != lead]
            if turn.next_speaker not in others:
                return [f"next_speaker: name who speaks next, one of: {', '.join(others)} "
                        f"(got {turn.next_speaker!r})"]
            return []
        return check

    def on_success(self, job: Job, result: InvokeResult) -> None:
        """A speech: add it to the pool, then pick the next speaker or end the chat."""
        if job.kind != "speech" or self.state.phase != "chatting":
            return
        if job.data.n != self.state.count:
            self.ctx.ledger.event("speech.stale", f"late speech of {job.role} ignored", None, role=job.role)
            return
        turn = self.ctx.structured(job, result, ChatTurn, self._check(job.role))
        if turn is None:
            return
        state = self.state
        n = state.count
        done = bool(turn.done and job.role == state.done_role)
        message = ChatMessage(n=n, role=job.role, round=state.round, message=turn.message,
                              next_speaker=turn.next_speaker, done=turn.done, at=self.ctx.clock(),
                              session=result.session_id)
        self.update_state(chat_outbox=[*state.chat_outbox, message], count=n + 1,
                          seen={**state.seen, job.role: n + 1})
        ignored = " (done signal ignored: only the done role ends the chat)" if turn.done and not done else ""
        self.ctx.ledger.event("speech", f"[{n}] {job.role} (round {message.round}){ignored}", turn.message[:300],
                          role=job.role, session=result.session_id, tokens=result.usage.total_tokens, n=n,
                          round=message.round, done=done)
        if done:
            self._end("done_signal", f"{job.role} said the discussion is done", message)
            return
        following = self._next_speaker(job.role, turn)
        if following is None:
            self._end("max_rounds", f"{self.settings.max_rounds} round(s) reached without a done signal", message)
            return
        self._ask(following)

    def _next_speaker(self, role: str, turn: ChatTurn) -> str | None:
        """Who speaks next (advancing the round), None when the rounds are used up."""
        state, max_rounds = self.state, self.settings.max_rounds
        if self.settings.selection == "lead_selects":
            if role == state.lead:
                return str(turn.next_speaker)
            next_round = state.round + 1
            self.update_state(round=next_round)
            return None if next_round > max_rounds else str(state.lead)
        speakers, count = state.speakers, state.count
        next_round = count // len(speakers) + 1
        self.update_state(round=next_round)
        return None if next_round > max_rounds else speakers[count % len(speakers)]

    def _end(self, terminated_by: Literal["done_signal", "max_rounds"], why: str, final: ChatMessage) -> None:
        ended = ChatEnding(terminated_by=terminated_by, why=why, final=final)
        self.update_state(round=min(self.state.round, self.settings.max_rounds), phase="ended", ended=ended)
        self.ctx.ledger.event("chat.ended", f"chat ended: {terminated_by}", why, role=final.role)
        self._finalize(ended)

    def _finalize(self, ended: ChatEnding) -> None:
        """Flush the pool, write the final answer and the transcript, finish the run."""
        self._flush()
        final = ended.final
        final_path = self.write_artifact(
            "final.md", f"# Final answer\n\n{final.message.strip()}\n\n"
            f"_{final.role}, message {final.n}; chat ended by {ended.terminated_by}_\n",
            role=final.role, what="final.md of the group chat")
        messages = self.messages()
        transcript_path = self.write_artifact("transcript.md", mode_prompts.chat_transcript(self.run, messages, ended.why),
                                              role="engine", what="transcript.md of the group chat")
        self.ctx.ledger.finish("done", ended.why, RunResult(
            summary=final.message.strip()[:4000], artifact=str(final_path), transcript=str(transcript_path),
            terminated_by=ended.terminated_by, rounds=self.state.round, messages=len(messages), final_by=final.role))

    def tick(self) -> None:
        """Flush committed messages; finish an ended chat; fail a chat that cannot go on."""
        phase, ended = self.state.phase, self.state.ended
        if phase == "ended" and ended is not None and self.run.status not in TERMINAL_RUN_STATES:
            self._finalize(ended)
            return
        if phase != "chatting":
            return
        self._flush()
        if not self.run.jobs and not self.run.open_checkpoints():
            self.ctx.ledger.finish("failed", "the chat cannot go on: the next speech was cancelled")
