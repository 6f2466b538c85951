"""How a profile is logged in to its vendor: a subscription plan or an API key (per tool, from its files).

A subscription turn is not billed per token: its cost is shown as what its tokens would cost,
marked as a subscription's. Each tool keeps its login in its own config home (the profile's
copy), so the answer is read from there and from the turn's environment; nothing here is
sent anywhere, and no secret is kept (only the kind of login). A login that cannot be told
(hermes keeps its providers' logins in forms that vary by provider) is None.

- claude: `ANTHROPIC_API_KEY` / `ANTHROPIC_AUTH_TOKEN` in the turn's environment is a key;
  else a `claudeAiOauth` entry in `.credentials.json` is a claude.ai (Pro/Max) login.
- codex: a custom `model_provider` in `config.toml` runs on that provider's key; else
  `auth.json` says `auth_mode` (`chatgpt` is a ChatGPT plan, `apikey` a key), or holds
  ChatGPT `tokens` (a plan) or an `OPENAI_API_KEY` (a key).
- opencode: `auth.json` in its data dir has an entry per provider, `"type": "oauth"` (a
  plan) or `"api"` (a key); a provider with `options.apiKey` in `opencode.json` uses a key.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

Billing = Literal["subscription", "api_key"]
MAX_LOGIN_FILE_BYTES = 1 << 20


def _json(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_LOGIN_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_LOGIN_FILE_BYTES:
        return None
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _claude(config_dir: Path, env: Mapping[str, str], model: str | None) -> Billing | None:
    if env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN"):
        return "api_key"
    credentials = _json(config_dir / ".credentials.json")
    if credentials is not None and isinstance(credentials.get("claudeAiOauth"), dict):
        return "subscription"
    return None


def _codex(config_dir: Path, env: Mapping[str, str], model: str | None) -> Billing | None:
    try:
        config = tomllib.loads((config_dir / "config.toml").read_text("utf-8")[:MAX_LOGIN_FILE_BYTES])
    except (OSError, ValueError, UnicodeDecodeError):
        config = {}
    if config.get("model_provider") not in (None, "openai"):
        return "api_key"
    auth = _json(config_dir / "auth.json")
    if auth is None:
        return "api_key" if env.get("OPENAI_API_KEY") else None
    mode = auth.get("auth_mode")
    if mode == "chatgpt":
        return "subscription"
    if mode == "apikey" or auth.get("OPENAI_API_KEY"):
        return "api_key"
    return "subscription" if isinstance(auth.get("tokens"), dict) else None


OPENCODE_AUTH = Path(".agentbox") / "data" / "opencode" / "auth.json"
"""opencode's logins, relative to its config dir (its XDG data dir lives there in a profile)."""


def _opencode(config_dir: Path, env: Mapping[str, str], model: str | None) -> Billing | None:
    provider = model.split("/", 1)[0] if model and "/" in model else None
    if provider is None:
        config = _json(config_dir / "opencode.json") or {}
        named = config.get("model")
        provider = named.split("/", 1)[0] if isinstance(named, str) and "/" in named else None
    if provider is None:
        return None
    entry = (_json(config_dir / OPENCODE_AUTH) or {}).get(provider)
    if isinstance(entry, dict) and entry.get("type") == "oauth":
        return "subscription"
    if isinstance(entry, dict) and entry.get("type") in ("api", "wellknown"):
        return "api_key"
    providers = (_json(config_dir / "opencode.json") or {}).get("provider")
    options = providers.get(provider, {}).get("options") if isinstance(providers, dict) and isinstance(
        providers.get(provider), dict) else None
    return "api_key" if isinstance(options, dict) and options.get("apiKey") else None


_BY_TOOL = {"claude": _claude, "codex": _codex, "opencode": _opencode}


def configured_model(tool: str, config_dir: Path) -> str | None:
    """The model the tool's own config names (codex's `config.toml`, opencode's `opencode.json`), if any.

    A turn whose profile names no model runs this one, and its tool may not say so in its
    output (codex does not): the price is looked up under it.
    """
    if tool == "codex":
        try:
            config = tomllib.loads((config_dir / "config.toml").read_text("utf-8")[:MAX_LOGIN_FILE_BYTES])
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        model = config.get("model")
    elif tool == "opencode":
        model = (_json(config_dir / "opencode.json") or {}).get("model")
    else:
        return None
    return model if isinstance(model, str) and model else None


def login_kind(tool: str, config_dir: Path, env: Mapping[str, str], model: str | None = None) -> Billing | None:
    """How `tool` is logged in with the profile's config home `config_dir` and the turn's `env`."""
    find = _BY_TOOL.get(tool)
    return None if find is None else find(config_dir, env, model)
