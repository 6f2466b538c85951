"""A session's files on their way between the head and a node (no cluster: the packing itself).

What the head sends is the profile and this one session's files, logins apart; what it keeps
of a node's answer is only what a turn may write in the tool's home, never through a link.
The real round trip (a claude session resumed on another node) is in test_ray_runner.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentbox.core.agents.invoke import Agent, new_session_id
from agentbox.core.agents.sessions import SessionRecord, SessionStore
from agentbox.core.config import profiles
from agentbox.core.engine.runners import travel
from agentbox.core.errors import AgentboxError

NATIVE = "11111111-2222-4333-8444-555555555555"
OTHER = "99999999-8888-4777-8666-555555555555"


def claude_agent(home: Path, tmp_path: Path) -> tuple[Agent, str]:
    directory = home / "profiles" / "c1"
    config = directory / "dot-claude"
    (config / "projects" / "-work").mkdir(parents=True)
    (directory / "profile.yaml").write_text('{"name": "c1", "runtime": {"tool": "claude"}}')
    (config / "projects" / "-work" / f"{NATIVE}.jsonl").write_text('{"this": "session"}\n')
    (config / "projects" / "-work" / f"{OTHER}.jsonl").write_text('{"another": "session"}\n')
    (config / "settings.json").write_text('{"model": "x"}\n')
    (config / ".credentials.json").write_text('{"login": "token"}\n')
    agent = Agent(profile=profiles.resolve("c1"), label="profile:c1", cwd=tmp_path,
                  sessions=SessionStore(tmp_path / "sessions"))
    session_id = new_session_id()
    agent.sessions.save(SessionRecord(id=session_id, owner="profile:c1", role=None, profile="c1", tool="claude",
                                      cwd=str(tmp_path), created=1.0, updated=1.0, native_id=NATIVE, turns=1))
    return agent, session_id


def test_only_this_session_s_files_travel_and_logins_apart(agent_box_home: Path, tmp_path: Path) -> None:
    agent, session_id = claude_agent(agent_box_home, tmp_path)
    sent, logins = travel.pack(agent, session_id, resume=True)
    assert set(sent.state) == {"profile.yaml", "dot-claude/settings.json", f"dot-claude/projects/-work/{NATIVE}.jsonl"}
    assert logins == {"dot-claude/.credentials.json": b'{"login": "token"}\n'}
    assert sent.record is not None and sent.record["native_id"] == NATIVE
    new, _ = travel.pack(agent, new_session_id(), resume=False)  # a new session takes no session's files
    assert not any("projects/" in name for name in new.state) and new.record is None

    node = travel.unpack(tmp_path / "node", agent.profile, sent, logins)
    assert node.profile.config_dir == tmp_path / "node" / "profiles" / "c1" / "dot-claude"
    assert (node.profile.config_dir / ".credentials.json").read_bytes() == b'{"login": "token"}\n'
    assert SessionStore(node.store_root).find(session_id).native_id == NATIVE
    (node.profile.config_dir / "projects" / "-work" / f"{NATIVE}.jsonl").write_text('{"this": "session"}\n{"t": 2}\n')
    back = travel.collect(node, session_id)
    assert set(back.config) == {f"projects/-work/{NATIVE}.jsonl"}  # what changed, no login


def test_what_comes_back_is_kept_only_where_a_turn_may_write(agent_box_home: Path, tmp_path: Path) -> None:
    agent, session_id = claude_agent(agent_box_home, tmp_path)
    config = agent.profile.config_dir
    back = travel.SessionBack(config={
        f"projects/-work/{NATIVE}.jsonl": b"turn two\n",
        "settings.json": b'{"hooks": "planted"}\n',      # loaded by the tool: never taken from a node
        "commands/run.md": b"planted\n",
        ".credentials.json": b"swapped\n",
        "../../escape.txt": b"out\n",
    }, record=None)
    travel.store_back(agent, back)
    assert (config / "projects" / "-work" / f"{NATIVE}.jsonl").read_bytes() == b"turn two\n"
    assert (config / "settings.json").read_text() == '{"model": "x"}\n'
    assert not (config / "commands").exists()
    assert (config / ".credentials.json").read_text() == '{"login": "token"}\n'
    assert not (agent_box_home / "profiles" / "escape.txt").exists() and not (agent_box_home / "escape.txt").exists()

    outside = tmp_path / "outside"
    outside.mkdir()
    (config / "plans").symlink_to(outside)  # a link planted where the next session file would go
    with pytest.raises(AgentboxError):
        travel.store_back(agent, travel.SessionBack(config={"plans/p.md": b"x"}, record=None))
    assert os.listdir(outside) == []


def test_the_record_and_logs_come_back_under_the_head_s_store(agent_box_home: Path, tmp_path: Path) -> None:
    agent, session_id = claude_agent(agent_box_home, tmp_path)
    sent, logins = travel.pack(agent, session_id, resume=True)
    node = travel.unpack(tmp_path / "node", agent.profile, sent, logins)
    node_store = SessionStore(node.store_root)
    record = node_store.find(session_id)
    record.turns = 2
    logs = node_store.logs_dir(record)
    logs.mkdir(parents=True)
    (logs / "turn-2.log").write_text("output\n")
    node_store.append_turn(record, {"turn": 2, "status": "ok", "log": str(logs / "turn-2.log")})
    node_store.save(record)
    travel.store_back(agent, travel.collect(node, session_id))
    here = agent.sessions.find(session_id)
    assert here.turns == 2 and here.native_id == NATIVE
    head_log = agent.sessions.logs_dir(here) / "turn-2.log"
    assert head_log.read_text() == "output\n"
    assert agent.sessions.turns(here) == [{"turn": 2, "status": "ok", "log": str(head_log)}]


async def test_a_session_busy_with_a_turn_here_is_not_sent_to_a_node(agent_box_home: Path, tmp_path: Path) -> None:
    from agentbox.core import store
    from agentbox.core.engine.runners.base import Turn
    from agentbox.core.engine.runners.ray_runner import RayRunner

    agent, session_id = claude_agent(agent_box_home, tmp_path)
    runner = RayRunner("127.0.0.1:1")  # never reached: the lock is taken before the cluster is
    with store.locked(agent.sessions.root / ".locks" / session_id):  # as `agentbox invoke --session` holds it
        done = await runner.run(Turn(job_id="j", run_id="r", task_id=None, agent=agent, prompt="p",
                                     session_id=session_id, resume=True, timeout_s=10))
    assert done.result.error_kind == "spawn_failed" and "busy with another turn" in (done.result.error or "")
