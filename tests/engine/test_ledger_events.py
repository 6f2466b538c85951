"""The ledger's one-line events: a checkpoint's event names its question's first line, the checkpoint keeps it whole."""

from __future__ import annotations

import time
from pathlib import Path

from agentbox.core import runs
from agentbox.core.engine.ledger import RunLedger
from agentbox.core.engine.run_store import RunStore
from tests.engine.support import setup_crew


def test_a_multi_line_question_is_one_line_in_the_log_and_whole_in_the_checkpoint(project: Path) -> None:
    paths = setup_crew(project)
    run = RunStore(paths).load(runs.create_run(paths, "build the thing").id)
    seen: list[dict[str, object]] = []
    ledger = RunLedger(run, clock=time.time, on_event=seen.append)
    question = "The run is done. Merge it into main?\n src/a.py | 2 +-\n 1 file changed\nAnswer 'merge' or 'later'."
    cp = ledger.checkpoint("deliver", question, options=["merge", "later"])
    event = next(event for event in seen if event["type"] == "checkpoint")
    assert event["why"] == "The run is done. Merge it into main? …"
    assert run.checkpoints[cp.id].question == question


def test_a_short_question_is_its_own_headline(project: Path) -> None:
    paths = setup_crew(project)
    run = RunStore(paths).load(runs.create_run(paths, "build the thing").id)
    seen: list[dict[str, object]] = []
    ledger = RunLedger(run, clock=time.time, on_event=seen.append)
    ledger.checkpoint("question", "English or French?")
    assert next(event for event in seen if event["type"] == "checkpoint")["why"] == "English or French?"
