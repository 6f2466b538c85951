"""The JSON Schemas of agentbox's files (`agentbox schema profile|crew|graph`), for editors."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agentbox.core.config import Crew, Profile
from agentbox.core.graph_model import Graph

SCHEMAS: dict[str, type[BaseModel]] = {"profile": Profile, "crew": Crew, "graph": Graph}


def json_schema(kind: Literal["profile", "crew", "graph"]) -> dict[str, Any]:
    """The JSON Schema of one of agentbox's files."""
    return SCHEMAS[kind].model_json_schema()
