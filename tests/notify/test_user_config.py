"""$AGENT_BOX_HOME/config.yaml: defaults, located errors, its schema, and hooks refused in crew.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbox.core.config.user_config import UserConfig, Webhook, load_user_config
from agentbox.core.errors import ConfigError
from tests.conftest import run_cli
from tests.notify.support import write_config


def test_a_missing_or_empty_file_means_the_defaults() -> None:
    assert load_user_config() == UserConfig()
    write_config("# nothing set yet\n")
    config = load_user_config()
    assert config.notify.bell and config.notify.desktop and config.notify.webhook is None
    assert config.hooks.on_checkpoint is None and config.hooks.timeout_s == 30


def test_every_setting_is_read() -> None:
    write_config(
        "notify:\n"
        "  bell: false\n"
        "  desktop: false\n"
        "  webhook: {url: 'https://ntfy.example/${TOPIC}', headers: {Authorization: 'Bearer ${TOKEN}'}, retries: 1}\n"
        "hooks:\n"
        "  on_checkpoint: notify-me --loud\n"
        "  on_run_end: [~/bin/ended, --json]\n"
        "  on_failure: ./failed.sh\n"
        "  timeout_s: 5\n")
    config = load_user_config()
    assert not config.notify.bell and not config.notify.desktop
    assert config.notify.webhook == Webhook(url="https://ntfy.example/${TOPIC}",
                                            headers={"Authorization": "Bearer ${TOKEN}"}, retries=1)
    assert config.hooks.on_checkpoint == "notify-me --loud"
    assert config.hooks.on_run_end == ["~/bin/ended", "--json"]
    assert config.hooks.timeout_s == 5


def test_a_plain_url_is_a_webhook_with_default_retries_and_timeout() -> None:
    write_config("notify:\n  webhook: http://127.0.0.1:9/x\n")
    webhook = load_user_config().notify.webhook
    assert webhook == Webhook(url="http://127.0.0.1:9/x") and webhook.retries == 3 and webhook.timeout_s == 10


@pytest.mark.parametrize(("text", "line", "field", "words"), [
    ("notify:\n  webhook: ftp://example/x\n", 2, "notify.webhook.url", "is not an http:// or https:// URL"),
    ("notify:\n  desktop: 'no'\n", 2, "notify.desktop", "valid boolean"),
    ("hooks:\n  on_checkpoint: ls\n  on_start: ls\n", 3, "hooks.on_start", "valid keys: on_checkpoint, on_run_end"),
    ("hooks:\n  timeout_s: 0\n", 2, "hooks.timeout_s", "greater than or equal to 1"),
    ("hooks:\n  timeout_s: 0.000001\n", 2, "hooks.timeout_s", "greater than or equal to 1"),
    ("notify:\n  webhook: {url: 'http://127.0.0.1:9/x', timeout_s: 0.001}\n", 2, "notify.webhook.timeout_s",
     "greater than or equal to 1"),
    ("hooks:\n  on_failure: []\n", 2, "hooks.on_failure", "the command is empty"),
    ("notify:\n  webhook: {url: 'https://x/${BROKEN'}\n", 2, "notify.webhook.url", "$"),
    ("editor: vim\n", 1, "editor", "unknown key"),
])
def test_bad_settings_name_file_line_and_field(text: str, line: int, field: str, words: str) -> None:
    path = write_config(text)
    with pytest.raises(ConfigError) as caught:
        load_user_config()
    error = caught.value
    assert (error.file, error.line, error.field) == (path, line, field), error.message
    assert words in error.message
    assert "agentbox schema config" in (error.hint or "")


def test_malformed_yaml_is_a_located_error() -> None:
    path = write_config("hooks: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_user_config()
    assert caught.value.file == path and caught.value.line == 1


def test_schema_config_prints_the_documented_model() -> None:
    result = run_cli("schema", "config")
    assert result.code == 0, result.err
    schema = json.loads(result.out)
    assert schema["title"] == "UserConfig"
    hooks = schema["$defs"]["Hooks"]["properties"]
    assert set(hooks) == {"on_checkpoint", "on_run_end", "on_failure", "timeout_s"}
    assert all(field.get("description") for field in hooks.values())
    assert {"type": "string"} in schema["$defs"]["Notify"]["properties"]["webhook"]["anyOf"]


def test_a_broken_config_stops_a_run_before_it_starts(project: Path) -> None:
    write_config("hooks:\n  on_checkpoint: 3\n")
    result = run_cli("run", "a goal", "--detach", cwd=project)
    assert result.code == 2
    assert "config.yaml:2" in result.err and "hooks.on_checkpoint" in result.err
    assert not (project / ".agent-box" / "runs").exists() or not any((project / ".agent-box" / "runs").iterdir())


@pytest.mark.parametrize("key", ["hooks", "notify"])
def test_a_crew_that_declares_hooks_is_refused_with_where_they_belong(project: Path, key: str) -> None:
    crew = project / ".agent-box" / "crew.yaml"
    lines = crew.read_text().splitlines()
    crew.write_text("\n".join(lines) + f"\n{key}:\n  on_checkpoint: curl https://attacker.example\n")
    result = run_cli("role", "list", cwd=project)
    assert result.code == 2
    assert f"crew.yaml:{len(lines) + 1}:1: {key}: {key} cannot be set in a project's crew.yaml" in result.err
    assert "$AGENT_BOX_HOME/config.yaml" in result.err and "docs/notifications.md" in result.err
    started = run_cli("run", "a goal", "--detach", cwd=project)
    assert started.code == 2 and "cannot be set in a project's crew.yaml" in started.err
