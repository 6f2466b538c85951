"""What an agent writes reaches the person's terminal as text, never as commands to the terminal.

Scripted agents under real bwrap put escape sequences (OSC 52 sets the clipboard, ESC[2J
clears the screen) and a newline that would forge a line of the run's log into a reply, a
checkpoint question, a brief, a file's content and a file name. They go through the real
CLI (`invoke`, a foreground `run`, `status`, `sessions show`, `diff`) and a notification
hook: each shows them visibly (`␛]52;…`), none lets a raw control character through, and
`--json` still holds the exact strings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.engine.support import review_rule, setup_crew, task, work_rule, write_profile
from tests.engine.test_worktree_runs import git, make_repo

pytestmark = pytest.mark.bwrap

OSC52 = "\x1b]52;c;SGVsbG8=\x07"
CLEAR = "\x1b[2J"
FORGED = "12:00:00 run.finished    run done"
"""A line the foreground run's log would print, which an agent must not be able to print."""


def hostile(what: str) -> str:
    return f"{what} {OSC52}{CLEAR}\x9b6n\rgone\n{FORGED}"


def assert_inert(output: str, *, must_show: bool = True, content: bool = False) -> None:
    """Nothing in `output` is a control character a terminal obeys; what was there is visible.

    Outside `content` (a reply or a patch shown as the text it is) no agent-made newline
    starts a line of its own.
    """
    raw = [c for c in output if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0]
    assert raw == [], f"raw control characters reach the terminal: {raw!r} in {output!r}"
    assert content or not any(line.startswith(FORGED) for line in output.splitlines()), output
    if must_show:
        assert "␛]52;c;SGVsbG8=␇" in output.replace("\n", "") and "␛[2J" in output, output


def test_hostile_text_is_shown_never_obeyed(project: Path, agent_box_home: Path, tmp_path: Path) -> None:
    make_repo(project)
    brief = hostile("brief")
    question = hostile("question")
    evil_name = "src/t1/evil\x1b]52;c;eA==\x07.txt"
    worker = [
        {"id": "ask", "when": {"prompt_contains": "[agentbox:work task=t1", "times": 1},
         "do": {"reply_json": {"summary": "need a decision", "question": question}}},
        work_rule(task_id="t1", rule_id="w1", write={"src/t1/code.py": f"VALUE = '{OSC52}{CLEAR}'\n",
                                                     evil_name: "x\n"},
                  reply_json={"summary": hostile("reply"), "artifacts": [], "evidence": ["wrote it"]}),
    ]
    planned = task("t1", "builder", writes=["src/**"])
    planned["brief"] = brief
    synthesis = {"id": "evil-synthesis", "when": {"prompt_contains": "[agentbox:synthesis"},
                 "do": {"reply": hostile("# Synthesis")}}
    setup_crew(project, lead=[synthesis], worker=worker, reviewer=[review_rule(task_id="t1")], tasks=[planned])
    git(project, "-c", "user.name=P", "-c", "user.email=p@example.invalid", "commit", "-qam", "crew")
    seen = tmp_path / "hook"
    (agent_box_home / "config.yaml").write_text(
        "notify:\n  desktop: false\nhooks:\n"
        f"  on_checkpoint: printf '%s' \"$AGENTBOX_TEXT\" >> {seen}.env; cat >> {seen}.json; echo >> {seen}.json\n")

    # invoke: the reply
    write_profile("t-evil", [], fallback={"reply": hostile("invoked")})
    invoked = run_cli("invoke", "profile:t-evil", "hi", cwd=project)
    assert invoked.code == 0, invoked.err
    assert_inert(invoked.out, content=True)
    assert json.loads(run_cli("invoke", "profile:t-evil", "hi", "--json", cwd=project).out)["text"] == hostile("invoked")

    # a foreground run: its live log and the checkpoint's announcement
    engine = subprocess.Popen([sys.executable, "-m", "agentbox", "run", "build it"], cwd=project,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=os.environ.copy())
    shown: list[bytes] = []
    reader = threading.Thread(target=lambda: shown.extend(iter(lambda: engine.stdout.read1(65536), b"")))  # type: ignore[union-attr]
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while b"waits for you" not in b"".join(shown):
            assert engine.poll() is None and time.monotonic() < deadline, b"".join(shown).decode()
            time.sleep(0.1)
        state = json.loads(run_cli("status", "--json", cwd=project).out)
        run_id = state["id"]
        cp = next(iter(state["checkpoints"].values()))
        assert cp["question"] == question and state["tasks"]["t1"]["brief"] == brief  # --json: exact

        waiting = run_cli("status", run_id, cwd=project)  # the question, while it waits
        assert waiting.code == 0 and "waiting for you" in waiting.out
        assert_inert(waiting.out)
        assert run_cli("answer", run_id, cp["id"], "go on", cwd=project).code == 0
        assert engine.wait(timeout=120) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
        reader.join()
    live = b"".join(shown).decode()
    assert_inert(live)
    assert "waits for you (task t1): question ␛]52;c;" in live.replace("\n", "")
    assert "\n  │ 12:00:00 run.finished" in live  # its second line is quoted under it

    # the hook got the notification's text made visible (and the exact question in JSON)
    assert_inert(Path(f"{seen}.env").read_text(), content=True)
    payload = json.loads(Path(f"{seen}.json").read_text().splitlines()[0])  # the question's (cp-1)
    assert payload["checkpoint"]["question"] == question
    assert_inert(payload["text"], content=True)

    # status, sessions show and diff of the finished run
    assert_inert(run_cli("status", run_id, cwd=project).out, content=True)  # the synthesis is the text it is
    session = json.loads(run_cli("status", run_id, "--json", cwd=project).out)["tasks"]["t1"]["session_id"]
    history = run_cli("sessions", "show", session, cwd=project)
    assert history.code == 0 and "reply" in history.out
    assert_inert(history.out, content=True)
    assert json.loads(run_cli("sessions", "show", session, "--json", cwd=project).out)["turns"][0]["prompt"].count(
        brief) == 1
    patch = run_cli("diff", run_id, cwd=project)
    assert patch.code == 0 and "src/t1/code.py" in patch.out
    assert_inert(patch.out, content=True)
    exact = json.loads(run_cli("diff", run_id, "--json", cwd=project).out)
    assert f"+VALUE = '{OSC52}{CLEAR}'" in exact["patch"]
    assert_inert(run_cli("runs", cwd=project).out, must_show=False)
