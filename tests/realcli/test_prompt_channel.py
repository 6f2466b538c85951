"""Prompts and role instructions reach each real CLI without ever being on a command line.

Any local user can read every process's command line (`ps`, /proc/PID/cmdline). While the
fake model server holds its answer, the test reads the command line of every process on
the machine; neither the prompt nor the role's instructions may appear in any of them
(except the `agentbox invoke ROLE PROMPT` process the test itself started with the
prompt as an argument). The model request proves both still arrived.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from tests.realcli.conftest import Box, FakeView, Turn, body_text, write_project

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]

#: How long the fake holds each answer: the agent's processes are alive meanwhile.
HOLD_S = 3.0


def _command_lines() -> dict[int, str]:
    """pid → command line (arguments joined by spaces) of every process we can see."""
    lines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        lines[int(entry.name)] = raw.replace(b"\0", b" ").decode("utf-8", "replace")
    return lines


@pytest.mark.parametrize("tool", ["claude", "codex", "opencode", "hermes"])
def test_prompt_and_instructions_never_on_a_command_line(tool: str, tmp_path: Path, make_profile,
                                                         fake: FakeView) -> None:
    tag = uuid.uuid4().hex[:8]
    prompt, marker = f"secret-prompt-{tag}", f"SECRET-INSTRUCTIONS-{tag}"
    profile = make_profile(tool)
    root = write_project(tmp_path / "proj", {"builder": {"profile": profile, "instructions": "roles/builder.md"}})
    (root / ".agent-box" / "roles" / "builder.md").write_text(f"You build things. {marker}\n")
    fake.enqueue({"text": f"held answer {tag}", "delay": HOLD_S, "times": -1, "match": {"contains": tag}})

    turn: dict[str, Turn] = {}
    runner = threading.Thread(target=lambda: turn.setdefault("t", Box(root).invoke("builder", prompt)))
    runner.start()
    leaks: set[str] = set()
    seen_sandbox = False
    while runner.is_alive():
        for cmdline in _command_lines().values():
            if " invoke builder " in cmdline and "agentbox" in cmdline:
                continue  # the test's own `python -m agentbox invoke builder PROMPT`
            seen_sandbox = seen_sandbox or Path(cmdline.split(" ", 1)[0]).name == "bwrap"
            if tag in cmdline:
                leaks.add(cmdline[:500])
        runner.join(0.05)

    result = turn["t"].result
    assert turn["t"].code == 0, str(turn["t"])
    assert not leaks, leaks
    assert seen_sandbox, "the agent's sandbox was never seen running: nothing was checked"
    assert f"held answer {tag}" in result["text"], str(turn["t"])
    bodies = [body_text(r) for r in fake.model_requests() if prompt in body_text(r)]
    assert bodies, "the prompt never reached the model"
    assert any(marker in body for body in bodies), "the role's instructions never reached the model"
