"""Real CLIs as project ROLES, running real tool calls inside agentbox's sandbox.

The fake answers with a tool call (claude `Bash`, codex `exec_command`); the CLI really
runs it in bwrap and sends the tool output back, which the fake logs. So the tool_result
the fake received is the sandbox's own testimony: a write inside the role's scope lands
on the host, writes outside it fail with a read-only file system, and a canary in the
host home does not exist in there.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.realcli.conftest import Box, FakeView, body_text, canary_secret, write_project

pytestmark = [pytest.mark.realcli, pytest.mark.bwrap]


def _anthropic_tool_results(fake: FakeView, mark: int) -> list[str]:
    """Text of every tool_result block claude sent after `mark`."""
    texts = []
    for request in fake.since(mark, "anthropic"):
        messages = (request.get("body") or {}).get("messages") or []
        if not messages or messages[-1].get("role") != "user":
            continue
        content = messages[-1].get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    inner = "\n".join(str(b.get("text", "")) for b in inner if isinstance(b, dict))
                texts.append(str(inner))
    return texts


def _responses_tool_outputs(fake: FakeView, mark: int) -> list[str]:
    """Output of every function_call_output codex sent after `mark` (the newest item only)."""
    outputs = []
    for request in fake.since(mark, "responses"):
        items = (request.get("body") or {}).get("input") or []
        if items and isinstance(items[-1], dict) and items[-1].get("type") == "function_call_output":
            outputs.append(str(items[-1].get("output")))
    return outputs


def _chat_tool_outputs(fake: FakeView, mark: int) -> list[str]:
    """Content of the newest `role: tool` message of every chat request after `mark`."""
    outputs = []
    for request in fake.since(mark, "chat"):
        messages = (request.get("body") or {}).get("messages") or []
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool":
            outputs.append(str(messages[-1].get("content")))
    return outputs


def _bash(command: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "agentbox realcli test"}},
            "match": {"protocol": "anthropic"}}


@pytest.fixture
def claude_project(tmp_path: Path, make_profile) -> tuple[Path, str]:
    """A project whose `builder` (claude) may write src/** only and `reviewer` nothing."""
    profile = make_profile("claude")
    marker = f"BUILDER-INSTRUCTIONS-{uuid.uuid4().hex[:8]}"
    root = write_project(tmp_path / "proj", {
        "builder": {"profile": profile, "instructions": "roles/builder.md", "writes": ["src/**"]},
        "reviewer": {"profile": profile, "writes": []},
    })
    (root / ".agent-box" / "roles" / "builder.md").write_text(f"You build things. {marker}\n")
    return root, marker


def test_claude_role_tool_use_respects_write_scope_and_hidden_home(
        claude_project: tuple[Path, str], fake: FakeView, host_home: Path) -> None:
    root, marker = claude_project
    box = Box(root)
    tag = uuid.uuid4().hex[:8]

    # -- turn 1 (new session): a write inside the role's scope lands in the project
    mark = fake.mark()
    fake.enqueue(_bash(f"echo inside-{tag} > src/inside.txt && cat src/inside.txt"))
    t1 = box.invoke("builder", f"write inside {tag}")
    assert t1.code == 0, str(t1)
    assert (root / "src" / "inside.txt").read_text() == f"inside-{tag}\n"
    results = _anthropic_tool_results(fake, mark)
    assert results and f"inside-{tag}" in results[-1], results
    assert f"echo: inside-{tag}" in t1.result["text"]
    first = fake.since(mark, "anthropic")[0]
    assert marker in body_text(first), "role instructions missing from the first turn (--append-system-prompt)"
    session = t1.result["session_id"]
    assert t1.result["role"] == "builder" and t1.result["native_id"] == session
    # claude's stream (stream-json) was shown as it came: the tool call, its result, the answer
    tail = run_cli("tail", "builder", cwd=root)
    assert tail.code == 0, tail.err
    assert f"→ Bash: echo inside-{tag} > src/inside.txt" in tail.out, tail.out
    assert f"  ← inside-{tag}" in tail.out and f"echo: inside-{tag}" in tail.out, tail.out

    # -- turn 2 (--continue): writes outside the scope fail; nothing reaches the host
    etc_file = Path(f"/etc/agentbox-realcli-{tag}")
    home_file = host_home / f"pwned-{tag}"
    crew_before = (root / ".agent-box" / "crew.yaml").read_text()
    mark = fake.mark()
    fake.enqueue(_bash(
        f"echo x > {root}/outside-{tag}.txt; echo root_rc=$?; "
        f"echo x > {etc_file}; echo etc_rc=$?; "
        f"echo x >> {root}/.agent-box/crew.yaml; echo box_rc=$?; "
        f"echo x > {home_file}; echo home_rc=$?"))
    try:
        t2 = box.invoke("builder", f"write outside {tag}", "--continue")
        assert t2.code == 0, str(t2)
        assert t2.result["session_id"] == session and t2.result["turn"] == 2
        output = _anthropic_tool_results(fake, mark)[-1]
        assert not (root / f"outside-{tag}.txt").exists()
        assert not etc_file.exists()
        assert not home_file.exists()
        assert (root / ".agent-box" / "crew.yaml").read_text() == crew_before
        for name in ("root", "etc", "box"):
            assert f"{name}_rc=0" not in output, output
        assert "Read-only file system" in output, output
        # the resumed request carries turn 1 (prompt and the tool exchange)
        assert f"write inside {tag}" in body_text(fake.since(mark, "anthropic")[0])
    finally:
        etc_file.unlink(missing_ok=True)

    # -- turn 3 (--continue): the host home's canary is not there inside the sandbox
    secret = canary_secret(host_home)
    canary = host_home / ".ssh" / "agentbox-canary"
    mark = fake.mark()
    fake.enqueue(_bash(f"cat {canary}; echo cat_rc=$?; ls -A {host_home}; echo ls_done"))
    t3 = box.invoke("builder", f"read the canary {tag}", "--continue")
    assert t3.code == 0, str(t3)
    output = _anthropic_tool_results(fake, mark)[-1]
    assert "No such file or directory" in output, output
    assert "cat_rc=0" not in output and "ls_done" in output, output
    listing = output.split("cat_rc=", 1)[1].split("ls_done")[0].split()[1:]
    assert ".ssh" not in listing, output  # the home inside is an empty tmpfs + the tool's config dir
    assert secret not in t3.cli.out
    assert all(secret not in body_text(r) for r in fake.requests())
    assert canary.read_text().strip() == secret  # it is there on the host

    shown = box.session(session)
    assert shown["session"]["owner"] == "builder" and shown["session"]["turns"] == 3
    assert (root / ".agent-box" / "sessions" / "builder").is_dir()


def test_claude_reviewer_role_cannot_write(claude_project: tuple[Path, str], fake: FakeView) -> None:
    root, _ = claude_project
    box = Box(root)
    tag = uuid.uuid4().hex[:8]
    mark = fake.mark()
    fake.enqueue(_bash(f"echo x > review-{tag}.txt; echo rc=$?"))
    turn = box.invoke("reviewer", f"review {tag}")
    assert turn.code == 0, str(turn)
    output = _anthropic_tool_results(fake, mark)[-1]
    assert "Read-only file system" in output and "rc=0" not in output, output
    assert not (root / f"review-{tag}.txt").exists()
    # the reviewer's own write tools are denied too (on top of the read-only mount)
    first = fake.since(mark, "anthropic")[0]
    declared = {t.get("name") for t in first["body"].get("tools") or []}
    assert "Bash" in declared and not declared & {"Edit", "Write"}, declared
    stderr_path = Path(turn.result["log_path"]).with_name("turn-1.stderr.log")
    stderr_log = stderr_path.read_text() if stderr_path.exists() else ""  # made only when written to
    assert "matches no known tool" not in stderr_log, stderr_log


@pytest.mark.parametrize("tool", ["codex", "opencode"])
def test_read_only_role_still_answers_and_cannot_write(tool: str, tmp_path: Path, make_profile,
                                                       fake: FakeView) -> None:
    """A reviewer's narrowed tool permissions (codex `-s read-only`, opencode edit: deny) do
    not stop the tool from working; a shell write fails on the read-only project."""
    profile = make_profile(tool)
    root = write_project(tmp_path / "proj", {"reviewer": {"profile": profile, "writes": []}})
    box = Box(root)
    tag = uuid.uuid4().hex[:8]
    command = f"echo x > review-{tag}.txt; echo rc=$?"
    if tool == "codex":
        spec = {"tool_use": {"name": "exec_command", "input": {"cmd": command}}, "match": {"protocol": "responses"}}
    else:
        spec = {"tool_use": {"name": "bash", "input": {"command": command, "description": "write"}},
                "match": {"has_tools": True}}
    mark = fake.mark()
    fake.enqueue(spec)
    turn = box.invoke("reviewer", f"review {tag}")
    assert turn.code == 0, str(turn)
    assert turn.result["text"].startswith("echo: "), str(turn)
    assert not (root / f"review-{tag}.txt").exists()
    outputs = (_responses_tool_outputs if tool == "codex" else _chat_tool_outputs)(fake, mark)
    assert outputs, "the tool call was not answered"
    assert "Read-only file system" in outputs[-1] and "rc=0" not in outputs[-1], outputs[-1]


def test_codex_role_runs_commands_in_scope(tmp_path: Path, make_profile, fake: FakeView) -> None:
    profile = make_profile("codex")
    root = write_project(tmp_path / "proj", {"builder": {"profile": profile, "writes": ["src/**"]}})
    box = Box(root)
    tag = uuid.uuid4().hex[:8]

    mark = fake.mark()
    fake.enqueue({"tool_use": {"name": "exec_command", "input": {"cmd": f"echo by-codex-{tag} > src/codex.txt"}},
                  "match": {"protocol": "responses"}})
    t1 = box.invoke("builder", f"write inside {tag}")
    assert t1.code == 0, str(t1)
    assert (root / "src" / "codex.txt").read_text() == f"by-codex-{tag}\n"
    assert _responses_tool_outputs(fake, mark), "codex sent no function_call_output"
    # one turn of two model requests: usage is the turn's own (2 x 9 uncached input)
    assert t1.result["usage"]["input_tokens"] == 18 and t1.result["usage"]["cached_input_tokens"] == 8
    tail = run_cli("tail", "builder", cwd=root)  # codex's JSONL events, shown as they came
    assert tail.code == 0, tail.err
    assert any(line.startswith("→ shell: ") and f"echo by-codex-{tag} > src/codex.txt" in line
               for line in tail.out.splitlines()), tail.out
    assert tail.out.splitlines()[-1].startswith("— turn ended: ok · "), tail.out

    mark = fake.mark()
    fake.enqueue({"tool_use": {"name": "exec_command", "input": {"cmd": f"echo x > outside-{tag}.txt; echo rc=$?"}},
                  "match": {"protocol": "responses"}})
    t2 = box.invoke("builder", f"write outside {tag}", "--continue")  # `codex exec resume … THREAD`
    assert t2.code == 0, str(t2)
    assert t2.result["native_id"] == t1.result["native_id"]
    output = _responses_tool_outputs(fake, mark)[-1]
    assert "Read-only file system" in output and "rc=0" not in output, output
    assert not (root / f"outside-{tag}.txt").exists()
    assert t2.result["usage"]["input_tokens"] == 18  # a delta, not the thread's cumulative 36


def test_claude_writes_literal_scopes_and_changes_nothing_beside_them(tmp_path: Path, make_profile,
                                                                      fake: FakeView) -> None:
    """`writes: [CHANGES.md, README.md]`: claude's Write (a temp file, then a rename) creates
    the missing one and Edit rewrites the existing one; the files beside them stay as they are."""
    profile = make_profile("claude")
    root = write_project(tmp_path / "proj", {"scribe": {"profile": profile, "writes": ["CHANGES.md", "README.md"]}})
    (root / "README.md").write_text("old readme\n")
    (root / "setup.py").write_text("keep\n")
    box = Box(root)
    tag = uuid.uuid4().hex[:8]

    def tool(name: str, **arguments: str) -> dict[str, Any]:
        return {"tool_use": {"name": name, "input": arguments}, "match": {"protocol": "anthropic"}}

    mark = fake.mark()
    fake.enqueue(tool("Write", file_path=str(root / "CHANGES.md"), content=f"changes {tag}\n"),
                 tool("Read", file_path=str(root / "README.md")),
                 tool("Edit", file_path=str(root / "README.md"), old_string="old", new_string=f"new {tag}"),
                 _bash(f"echo x >> {root}/setup.py; echo rc=$?"))
    turn = box.invoke("scribe", f"write the changes {tag}")
    assert turn.code == 0, str(turn)
    results = _anthropic_tool_results(fake, mark)
    assert (root / "CHANGES.md").read_text() == f"changes {tag}\n", results
    assert (root / "README.md").read_text() == f"new {tag} readme\n", results
    assert "Read-only file system" in results[-1] and "rc=0" not in results[-1], results
    assert (root / "setup.py").read_text() == "keep\n"


def _declared_tools(request: dict[str, Any]) -> set[str]:
    """Names of the tools a model request offers (chat: `function.name`; responses: `name`)."""
    names = set()
    for tool in (request.get("body") or {}).get("tools") or []:
        if isinstance(tool, dict):
            names.add(str((tool.get("function") or {}).get("name") or tool.get("name") or tool.get("type")))
    return names


#: Tools that change files, per CLI: a read-only role is never offered them. (codex 0.171.0
#: has none to drop: it reads and writes through `exec_command`, its `-s read-only` cannot
#: start inside bwrap, and the read-only mount stops its writes, as tested above.)
WRITE_TOOLS = {"opencode": {"edit", "write", "patch", "multiedit"},
               "hermes": {"write_file", "patch", "execute_code", "delegate_task", "skill_manage", "memory"}}


@pytest.mark.parametrize("tool", ["opencode", "hermes"])
def test_read_only_role_is_offered_no_write_tools_on_new_and_resumed_turns(
        tool: str, tmp_path: Path, make_profile, fake: FakeView) -> None:
    profile = make_profile(tool)
    root = write_project(tmp_path / "proj", {"reviewer": {"profile": profile, "writes": []},
                                             "builder": {"profile": profile, "writes": ["src/**"]}})
    box = Box(root)
    protocol = "chat"
    offered: dict[str, list[set[str]]] = {}
    for role in ("builder", "reviewer"):
        offered[role] = []
        for flags in ((), ("--continue",)):
            mark = fake.mark()
            turn = box.invoke(role, f"look around {uuid.uuid4().hex[:8]}", *flags)
            assert turn.code == 0, str(turn)
            requests = [r for r in fake.since(mark, protocol) if _declared_tools(r)]
            assert requests, f"{tool} offered no tools at all"
            offered[role].append(_declared_tools(requests[-1]))
    assert all(WRITE_TOOLS[tool] & tools for tools in offered["builder"]), offered["builder"]
    for tools in offered["reviewer"]:
        assert not WRITE_TOOLS[tool] & tools, tools
