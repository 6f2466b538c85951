"""The one wording of pydantic errors: the same sentence for config files, graphs and replies."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from agentbox.core.config.models import Profile
from agentbox.core.engine.replies import ChecklistItem
from agentbox.core.graph.model import Graph
from agentbox.core.validation import Problem, path_of, problems


def _problems(model: type[BaseModel], data: Any, synonyms: dict[str, str] | None = None) -> list[Problem]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return problems(model, caught.value.errors(), synonyms)


def test_paths_are_keys_and_indexes() -> None:
    assert path_of(("tasks", 0, "acceptance")) == "tasks[0].acceptance"
    assert path_of(()) == ""


def test_a_value_that_fits_no_union_member_lists_what_each_accepts() -> None:
    data = {"name": "p", "runtime": {"tool": "scripted"}, "sandbox": "sometimes"}
    (problem,) = _problems(Profile, data)
    assert problem.loc == ("sandbox",)
    assert problem.message == "invalid value 'sometimes'; allowed: a mapping with keys network, allow, ro_binds, rw_binds or 'none'"


def test_inside_a_union_member_only_its_errors_count() -> None:
    data = {"name": "p", "runtime": {"tool": "scripted"}, "sandbox": {"netwrk": True}}
    (problem,) = _problems(Profile, data)
    assert problem.loc == ("sandbox", "netwrk")
    assert problem.message == "unknown key; valid keys: network, allow, ro_binds, rw_binds"


def test_valid_keys_are_written_as_in_the_document() -> None:
    (problem,) = _problems(ChecklistItem, {"item": "x", "acceptance_id": "A1", "pass": True, "uri": "u"})
    assert problem.message == "unknown key; valid keys: item, acceptance_id, pass, evidence"


def test_an_aliased_key_is_followed_and_slips_get_a_suggestion() -> None:
    graph = {"nodes": [{"name": "a", "role": "r", "brief": "b"}],
             "edges": [{"from": "a", "to": "a", "condition": "success", "edgeKind": "forward"}]}
    (problem,) = _problems(Graph, graph, {"edgeKind": "kind"})
    assert problem.path == "edges[0].edgeKind"
    assert problem.message.startswith("unknown key (did you mean 'kind'?); valid keys: from, to, condition")
