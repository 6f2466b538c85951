"""Group chat mode: a shared message pool, a speaker rule, and two ways to end.

Every message goes to the run's pool, `chat.jsonl` (one JSON line per message, numbered
`n` from 0). A speaker's turn is a job of kind `speech` (no task) in the speaker's own
session (`session_key chat:<role>`); it is sent only the pool messages it has not seen
(`mode_state.seen[role]` is the first message number it has not been shown) and answers
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

Crash safety: a message is committed in run.json (`mode_state.chat_outbox`) before it is
appended to chat.jsonl, and appended only if the pool does not hold its number yet, so a
kill at any point neither loses nor repeats a message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentbox.core import store
from agentbox.core.config import GroupChatSettings
from agentbox.core.engine import mode_prompts
from agentbox.core.engine.models import TERMINAL_RUN_STATES, Job, Task
from agentbox.core.engine.modes.base import ModeDriver
from agentbox.core.engine.replies import ChatTurn
from agentbox.core.invoke import InvokeResult

CHAT_FILE = "chat.jsonl"


class GroupChatMode(ModeDriver):
    """Speeches into a shared pool until the done signal or the round limit."""

    name = "group_chat"

    # ------------------------------------------------------------------ pool
    @property
    def pool_path(self) -> Path:
        """The run's message pool."""
        return self.ctx.store.dir(self.run.id) / CHAT_FILE

    def _pool(self) -> list[dict[str, Any]]:
        """Messages already in chat.jsonl, by number, each once."""
        records, _ = store.read_jsonl(self.pool_path)
        by_n: dict[int, dict[str, Any]] = {}
        for record in records:
            by_n.setdefault(int(record["n"]), record)
        return [by_n[n] for n in sorted(by_n)]

    def messages(self) -> list[dict[str, Any]]:
        """Every accepted message: the pool plus those not yet flushed to it."""
        pool = self._pool()
        known = {m["n"] for m in pool}
        return pool + [m for m in self.state.get("chat_outbox", []) if m["n"] not in known]

    def _flush(self) -> None:
        """Commit the state, then append the committed messages the pool does not hold yet."""
        outbox = self.state.get("chat_outbox") or []
        if not outbox:
            return
        self.ctx.save()
        pool = self._pool()
        last = pool[-1]["n"] if pool else -1
        for message in outbox:
            if message["n"] > last:
                store.append_jsonl(self.pool_path, message)
                last = message["n"]
        self.state["chat_outbox"] = []

    # ------------------------------------------------------------------ settings
    def _resolve(self) -> list[str]:
        """Fill the mode state from the settings snapshot; the problems that stop the chat."""
        settings = self.run.contract.settings_as(GroupChatSettings)
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
        self.state.update(speakers=speakers, selection=selection, lead=lead, done_role=done_role,
                          max_rounds=settings.max_rounds, count=0, round=0, seen={},
                          chat_outbox=[])
        return problems

    # ------------------------------------------------------------------ hooks
    def start(self) -> None:
        """Open the chat with the first speaker (the lead under lead_selects)."""
        problems = self._resolve()
        if problems:
            self.ctx.ledger.finish("failed", "group chat cannot start: " + "; ".join(problems))
            return
        self.state["phase"] = "chatting"
        first = self.state["lead"] if self.state["selection"] == "lead_selects" else self.state["speakers"][0]
        self.state["round"] = 1
        self._ask(first)

    def reviewer_for(self, task: Task) -> str:
        """Chats have no tasks to review."""
        return task.assignee

    def _ask(self, role: str) -> None:
        n = int(self.state["count"])
        seen = int(self.state["seen"].get(role, 0))
        unseen = [m for m in self.messages() if m["n"] >= seen]
        prompt = mode_prompts.speech_prompt(
            self.run, role, n=n, round_no=int(self.state["round"]), max_rounds=int(self.state["max_rounds"]),
            speakers=self.state["speakers"], selection=self.state["selection"], lead=self.state["lead"],
            done_role=self.state["done_role"], unseen=unseen, first_turn=role not in self.state["seen"])
        self.ctx.ledger.enqueue("speech", role, prompt, session_key=f"chat:{role}", original_prompt=prompt,
                            n=n, round=int(self.state["round"]))

    def _check(self, role: str) -> Any:
        def check(turn: ChatTurn) -> list[str]:
            lead = self.state["lead"]
            if self.state["selection"] != "lead_selects" or role != lead:
                return []
            if turn.done and role == self.state["done_role"]:
                return []
            others = [s for s in self.state["speakers"] if s != lead]
            if turn.next_speaker not in others:
                return [f"next_speaker: name who speaks next, one of: {', '.join(others)} "
                        f"(got {turn.next_speaker!r})"]
            return []
        return check

    def on_success(self, job: Job, result: InvokeResult) -> None:
        """A speech: add it to the pool, then pick the next speaker or end the chat."""
        if job.kind != "speech" or self.state.get("phase") != "chatting":
            return
        if int(job.data.get("n", -1)) != int(self.state["count"]):
            self.ctx.ledger.event("speech.stale", f"late speech of {job.role} ignored", None, role=job.role)
            return
        turn = self.ctx.structured(job, result, ChatTurn, self._check(job.role))
        if turn is None:
            return
        n = int(self.state["count"])
        done = bool(turn.done and job.role == self.state["done_role"])
        message = {"n": n, "role": job.role, "round": int(self.state["round"]), "message": turn.message,
                   "next_speaker": turn.next_speaker, "done": turn.done, "at": self.ctx.clock(),
                   "session": result.session_id}
        self.state["chat_outbox"].append(message)
        self.state["count"] = n + 1
        self.state["seen"][job.role] = n + 1
        ignored = " (done signal ignored: only the done role ends the chat)" if turn.done and not done else ""
        self.ctx.ledger.event("speech", f"[{n}] {job.role} (round {message['round']}){ignored}", turn.message[:300],
                          role=job.role, session=result.session_id, tokens=result.usage.total_tokens, n=n,
                          round=message["round"], done=done)
        if done:
            self._end("done_signal", f"{job.role} said the discussion is done", message)
            return
        following = self._next_speaker(job.role, turn)
        if following is None:
            self._end("max_rounds", f"{self.state['max_rounds']} round(s) reached without a done signal", message)
            return
        self._ask(following)

    def _next_speaker(self, role: str, turn: ChatTurn) -> str | None:
        """Who speaks next (advancing the round), None when the rounds are used up."""
        speakers = self.state["speakers"]
        if self.state["selection"] == "lead_selects":
            if role == self.state["lead"]:
                return str(turn.next_speaker)
            self.state["round"] = int(self.state["round"]) + 1
            return None if self.state["round"] > int(self.state["max_rounds"]) else str(self.state["lead"])
        count = int(self.state["count"])
        self.state["round"] = count // len(speakers) + 1
        return None if self.state["round"] > int(self.state["max_rounds"]) else speakers[count % len(speakers)]

    def _end(self, terminated_by: str, why: str, final: dict[str, Any]) -> None:
        self.state["round"] = min(int(self.state["round"]), int(self.state["max_rounds"]))
        self.state["phase"] = "ended"
        self.state["ended"] = {"terminated_by": terminated_by, "why": why, "final": final}
        self.ctx.ledger.event("chat.ended", f"chat ended: {terminated_by}", why, role=final["role"])
        self._finalize()

    def _finalize(self) -> None:
        """Flush the pool, write the final answer and the transcript, finish the run."""
        self._flush()
        ended = self.state["ended"]
        final = ended["final"]
        final_path = self.write_artifact(
            "final.md", f"# Final answer\n\n{str(final['message']).strip()}\n\n"
            f"_{final['role']}, message {final['n']}; chat ended by {ended['terminated_by']}_\n",
            role=final["role"], what="final.md of the group chat")
        messages = self.messages()
        transcript_path = self.write_artifact("transcript.md", mode_prompts.chat_transcript(self.run, messages, ended["why"]),
                                              role="engine", what="transcript.md of the group chat")
        self.ctx.ledger.finish("done", ended["why"], {
            "summary": str(final["message"]).strip()[:4000], "artifact": str(final_path),
            "transcript": str(transcript_path), "terminated_by": ended["terminated_by"],
            "rounds": int(self.state["round"]), "messages": len(messages), "final_by": final["role"]})

    def tick(self) -> None:
        """Flush committed messages; finish an ended chat; fail a chat that cannot go on."""
        phase = self.state.get("phase")
        if phase == "ended" and self.run.status not in TERMINAL_RUN_STATES:
            self._finalize()
            return
        if phase != "chatting":
            return
        self._flush()
        if not self.run.jobs and not self.run.open_checkpoints():
            self.ctx.ledger.finish("failed", "the chat cannot go on: the next speech was cancelled")
