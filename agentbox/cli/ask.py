"""`agentbox ask [RUN] QUESTION`: the liaison's answer, with the time of the data it read."""

from __future__ import annotations

import argparse
import asyncio
import time

from agentbox.cli.common import print_json, project_from
from agentbox.core.errors import AgentboxError
from agentbox.core.termtext import for_terminal


def _split(project: object, words: list[str]) -> tuple[str | None, str]:
    """A first word naming one of the project's runs is the run; the rest is the question.

    Only a whole run id, `latest`, or a prefix of one starting `run-` counts: a question's first
    word ("add", "be", "2") must never be taken for the end of some run's id."""
    from agentbox.core.engine.run_store import RunStore

    if len(words) > 1 and (words[0] == "latest" or words[0].startswith("run-")):
        try:
            return RunStore(project).resolve_id(words[0]), " ".join(words[1:])  # type: ignore[arg-type]
        except AgentboxError:
            pass
    return None, " ".join(words)


def ask(args: argparse.Namespace) -> int:
    """Ask, wait for the answer, print it under its data time."""
    from agentbox.core.reports import liaison

    project = project_from(args)
    run_id, question = _split(project, args.words)
    answer = asyncio.run(liaison.ask(project, question, run_id, whole_project=args.runs))
    if args.json:
        print_json({"ok": answer.ok, "answer": answer.text, "data_as_of": liaison.stamp(answer.as_of),
                    "run": answer.run_id, "session_id": answer.session_id, "tokens": answer.tokens,
                    "cost_usd": answer.cost_usd, "error": answer.error})
        return 0 if answer.ok else 1
    about = answer.run_id or "the project's runs"
    print(f"liaison on {about} · data as of {liaison.stamp(answer.as_of)} ({liaison.ago(time.time() - answer.as_of)})")
    if not answer.ok:
        print(f"error: the liaison's turn failed: {for_terminal(answer.error)}")
        return 1
    print(for_terminal(answer.text))
    tokens = "unknown tokens" if answer.tokens is None else f"{answer.tokens} tokens"
    cost = "" if answer.cost_usd is None else f" · ${answer.cost_usd:.4f}"
    print(f"— {tokens}{cost} · session {answer.session_id[:8]} (a follow-up `agentbox ask` continues it)")
    return 0
