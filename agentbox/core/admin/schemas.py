"""The JSON Schemas of agentbox's files (`agentbox schema profile|crew|graph|config`), for editors."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agentbox.core.config.models import Crew, Profile
from agentbox.core.config.user_config import UserConfig
from agentbox.core.graph.model import Graph

SCHEMAS: dict[str, type[BaseModel]] = {"profile": Profile, "crew": Crew, "graph": Graph, "config": UserConfig}


def json_schema(kind: Literal["profile", "crew", "graph", "config"]) -> dict[str, Any]:
    """The JSON Schema of one of agentbox's files."""
    return SCHEMAS[kind].model_json_schema()
