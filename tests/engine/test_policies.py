"""Engine policies at the decision level: no process, no disk."""

from __future__ import annotations

import pytest

from agentbox.core.engine import commands
from agentbox.core.errors import UsageError


@pytest.mark.parametrize(("raw", "kind"), [
    ({"action": "answer", "checkpoint": "cp-1", "text": "yes", "id": "cmd-1"}, commands.Answer),
    ({"action": "approve", "task": "t1", "note": "checked"}, commands.Approve),
    ({"action": "rework", "task": "t1", "note": "fix it"}, commands.Rework),
    ({"action": "cancel_task", "task": "t1"}, commands.CancelTask),
    ({"action": "cancel_run"}, commands.CancelRun),
    ({"action": "pause", "at": 12.5}, commands.Pause),
    ({"action": "resume", "extra": "ignored"}, commands.Resume),
])
def test_a_command_is_read_as_the_model_of_its_action(raw: dict[str, object], kind: type) -> None:
    command = commands.parse(raw)
    assert type(command) is kind and command.action == raw["action"]
    assert kind in commands.HANDLERS


@pytest.mark.parametrize(("raw", "message"), [
    ({"task": "t1"}, "malformed command: command without a string `action`"),
    ({"action": "explode"}, "unknown command 'explode'"),
    ({"action": "answer", "text": 3}, "malformed command: command field 'text' is not a string"),
    ({"action": "pause", "at": "noon"}, "malformed command: at:"),
])
def test_a_malformed_command_is_a_clean_refusal(raw: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as refused:
        commands.parse(raw)
    assert refused.value.message.startswith(message)
