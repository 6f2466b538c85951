"""The prompts of group chat, handoff and graph mode, and the transcripts they leave.

Like `prompts`, each prompt starts with a marker line (`[agentbox:speech ...]`,
`[agentbox:handoff ...]`, `[agentbox:node ...]`) so agents and the scripted runtime's
scenarios can tell what is being asked. Judgement lives here, in words; the rules
(who speaks, where a failure goes, how often) live in the mode drivers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentbox.core.engine.mode_state import ChatMessage, Delivery, HandoffAnswer, HandoffHop
from agentbox.core.engine.models import Run, Task, TaskNote
from agentbox.core.engine.prompts import note_line
from agentbox.core.engine.replies import FORMAT_HINTS, NodeResult

NODE_RESULT_EXAMPLES: tuple[dict[str, Any], ...] = (
    {"summary": "Implemented greet() in src/greet.py.", "artifacts": ["src/greet.py"],
     "evidence": ["python -c 'from src.greet import greet; print(greet(\"Ada\"))' printed Hello, Ada!"],
     "outcome": "success"},
    {"summary": "greet() ignores an empty name.", "artifacts": [], "evidence": ["greet('') returned 'Hello, !'"],
     "outcome": "fail", "fail_reason": "impl_bug", "remediation": "Return 'Hello!' when the name is empty."},
)

NODE_RESULT_HINT = (
    "End your reply with one JSON object in a ```json block: a summary, the artifacts you produced "
    "(paths), the evidence (what you ran or read), and `outcome`: `success`, or `fail` with a "
    "`fail_reason` and a `remediation` note saying what the node that gets the work back should "
    "change. If you need a human decision to go on, set `question` instead of guessing.\n"
    "Examples:\n" + "\n".join(f"```json\n{json.dumps(e, indent=2)}\n```" for e in NODE_RESULT_EXAMPLES)
)
"""The instruction and examples appended to every node prompt."""


def _listing(items: Sequence[str]) -> str:
    return ", ".join(items) if items else "(none)"


# ----------------------------------------------------------------------------- group chat


def chat_line(message: ChatMessage) -> str:
    """One pool message as a speaker sees it: `[3] critic: ...`."""
    return f"[{message.n}] {message.role}: {message.message}"


def speech_prompt(run: Run, role: str, *, n: int, round_no: int, max_rounds: int, speakers: Sequence[str],
                  selection: str, lead: str | None, done_role: str | None, unseen: Sequence[ChatMessage],
                  first_turn: bool) -> str:
    """Ask one member for its next message to the pool (only what it has not seen is sent)."""
    parts = [f"[agentbox:speech role={role} round={round_no} n={n}]"]
    if first_turn:
        roster = ", ".join(f"{s} (lead: picks who speaks next)" if s == lead and selection == "lead_selects" else s
                           for s in speakers)
        how = ("the lead names the next speaker after each of its messages" if selection == "lead_selects"
               else "members speak in turn (round robin)")
        end = f"after {max_rounds} round(s)" + (f", or as soon as {done_role} says it is done" if done_role else "")
        parts += [
            f"You are {role} in a group chat about this goal: {run.contract.goal}",
            f"Members: {roster}. Speaker selection: {how}. The chat ends {end}.",
            "Keep each message short and build on what the others said.",
        ]
    if unseen:
        parts.append("New messages since your last turn:\n" + "\n".join(chat_line(m) for m in unseen))
    else:
        parts.append("No messages yet: you open the discussion.")
    parts.append(f"It is your turn ({role}, round {round_no} of {max_rounds}).")
    if selection == "lead_selects" and role == lead:
        others = [s for s in speakers if s != lead]
        parts.append(f"Name who speaks next in `next_speaker` (one of: {_listing(others)}).")
    if done_role == role:
        parts.append("When the discussion has reached its answer, set `done: true` and put the final answer "
                     "in `message`; it becomes the run's result.")
    parts.append(FORMAT_HINTS["ChatTurn"])
    return "\n\n".join(parts)


def chat_transcript(run: Run, messages: Sequence[ChatMessage], ended: str) -> str:
    """The whole chat as markdown."""
    lines = [f"# Group chat transcript ({run.id})", "", f"Goal: {run.contract.goal}", ""]
    for message in messages:
        flags = []
        if message.next_speaker:
            flags.append(f"next: {message.next_speaker}")
        if message.done:
            flags.append("done")
        suffix = f" _({', '.join(flags)})_" if flags else ""
        lines += [f"## [{message.n}] {message.role} — round {message.round}{suffix}", "",
                  message.message.strip(), ""]
    lines.append(f"_Ended: {ended}_")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- handoff


def handoff_prompt(run: Run, role: str, *, hop: int, roles: dict[str, str], trail: Sequence[HandoffHop],
                   message: str | None, note: str | None, handoffs_left: int) -> str:
    """Ask the active role to answer, or to hand the conversation on."""
    parts = [f"[agentbox:handoff role={role} hop={hop}]", f"Goal: {run.contract.goal}"]
    if trail:
        parts.append("Handoffs so far:\n" + "\n".join(
            f"- {h.source} → {h.to}: {h.message[:300]}" for h in trail))
    if message and trail:
        parts.append(f"{trail[-1].source} handed the conversation to you ({role}):\n{message}")
    if note:
        parts.append(f"Note from the human: {note}")
    others = "\n".join(f"- {name}: {desc}" for name, desc in roles.items() if name != role)
    parts.append(f"Roles you can hand over to:\n{others or '- (none)'}")
    if handoffs_left > 0:
        parts.append(f"Answer yourself when you can; hand off only when another role is better placed "
                     f"({handoffs_left} handoff(s) left in this run).")
    else:
        parts.append("No handoffs are left in this run: a handoff now ends the run without an answer. Answer.")
    parts.append(FORMAT_HINTS["Handoff"])
    return "\n\n".join(parts)


def handoff_transcript(run: Run, trail: Sequence[HandoffHop], final: HandoffAnswer | None, ended: str) -> str:
    """The handoff chain as markdown."""
    lines = [f"# Handoff transcript ({run.id})", "", f"Goal: {run.contract.goal}", ""]
    for index, hop in enumerate(trail, start=1):
        lines += [f"## {index}. {hop.source} → {hop.to}", "", hop.message.strip(), ""]
        if hop.note:
            lines += [f"_Note from the human: {hop.note}_", ""]
    if final is not None:
        lines += [f"## Answer by {final.role}", "", final.message.strip(), ""]
    lines.append(f"_Ended: {ended}_")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- graph


def _task_line(task: Task, artifacts_dir: str) -> str:
    files = ", ".join(task.submitted_artifacts) or "none listed"
    return (f"- {task.node} ({task.id}, {task.assignee}): {task.submitted_summary} "
            f"[artifacts: {files}; hand-on dir: {artifacts_dir}/{task.id}/]")


def node_prompt(run: Run, task: Task, *, artifacts_dir: str, upstream: Sequence[Task],
                failures: Sequence[tuple[Task, Delivery]], previous: Task | None,
                routes: Sequence[str], note: TaskNote | None) -> str:
    """Ask a node's role to do the node's one thing and report its outcome."""
    scope = ", ".join(task.writes) if task.writes else "(read-only: do not modify files)"
    parts = [
        f"[agentbox:node node={task.node} task={task.id} round={task.round} attempt={task.attempts + 1}]",
        f"Run goal: {run.contract.goal}",
        f"Node {task.node}" + (f" (run {task.round})" if task.round > 1 else "") + f": {task.brief}",
        f"You may write: {scope}. Put files you hand on in {artifacts_dir}/{task.id}/.",
    ]
    if upstream:
        parts.append("Input from upstream nodes:\n" + "\n".join(_task_line(t, artifacts_dir) for t in upstream))
    for source, delivery in failures:
        reason = delivery.reason or "no reason given"
        remediation = source.submission.remediation if isinstance(source.submission, NodeResult) else None
        parts.append(f"Node {source.node} failed ({reason}) and sent the work here: "
                     f"{source.submitted_summary}\n"
                     f"Remediation: {remediation or '(none given)'}\n"
                     f"Its report: {_task_line(source, artifacts_dir)[2:]}")
    if previous is not None:
        parts.append(f"Your previous run of this node:\n{_task_line(previous, artifacts_dir)}")
    if note:
        parts.append(note_line(note))
    if routes:
        parts.append("If the node fails, say why with `fail_reason`; this graph routes:\n" + "\n".join(routes))
    else:
        parts.append("A failure of this node stops it (blocked) until a human decides.")
    parts.append(NODE_RESULT_HINT)
    return "\n\n".join(parts)


def graph_result(run: Run, order: Sequence[str], latest: dict[str, Task]) -> str:
    """The run's result: each node's last report, in graph order."""
    lines = [f"# Work graph result ({run.id})", "", f"Goal: {run.contract.goal}", ""]
    for name in order:
        task = latest.get(name)
        if task is None:
            lines += [f"## {name}", "", "_not run_", ""]
            continue
        outcome = task.submission.outcome if isinstance(task.submission, NodeResult) else "success"
        lines += [f"## {name} ({task.id}, {task.assignee}, {task.state}, outcome {outcome})", "",
                  task.submitted_summary]
        if task.submitted_artifacts:
            lines.append("Artifacts: " + ", ".join(task.submitted_artifacts))
        lines.append("")
    return "\n".join(lines) + "\n"
