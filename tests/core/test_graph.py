"""Work graphs: the invalid corpus (rule, detail, line), the valid examples, the helpers, the CLI."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from agentbox.cli.graph import graph_check
from agentbox.core.admin.schemas import json_schema
from agentbox.core.errors import GraphError, NotFoundError, Violation
from agentbox.core.graph.load import (
    RULES,
    check_graph_file,
    check_graph_text,
    entry,
    fail_edge,
    forward_predecessors,
    forward_successors,
    get_node,
    load_graph,
    resolve_graph,
    topological_order,
    validate_graph,
)
from agentbox.core.graph.model import Edge, Graph
from agentbox.core.paths import ProjectPaths
from agentbox.core.yaml_io import load_yaml, parse_yaml
from tests.conftest import run_cli

DATA = Path(__file__).resolve().parent.parent / "data" / "graphs"
VALID = sorted((DATA / "valid").glob("*.yaml"))
INVALID_DIR = DATA / "invalid"
INVALID = sorted(p for p in INVALID_DIR.glob("*.yaml") if p.name != "expected.yaml")
EXPECTED: dict[str, list[dict[str, object]]] = {
    str(name): [dict(item) for item in items]
    for name, items in load_yaml(INVALID_DIR / "expected.yaml").items()
}

# The crew the corpus is checked against (every role the valid examples use).
ROLES = [
    "lead",
    "builder",
    "reviewer",
    "coder",
    "unit-tester",
    "coder-validator",
    "planner",
    "writer",
    "integrator",
    "validator-triager",
    "benchmark-validator",
    "testdata-validator",
]


def _graph(text: str) -> Graph:
    graph, violations = check_graph_text(text, "inline.yaml")
    assert violations == [] and graph is not None
    return graph


# ----------------------------------------------------------------------------- corpus


def test_corpus_is_large_and_fully_described() -> None:
    assert len(INVALID) >= 24
    assert sorted(EXPECTED) == sorted(p.name for p in INVALID)
    assert len(VALID) >= 5
    covered = {str(item["rule"]) for items in EXPECTED.values() for item in items}
    assert covered == set(RULES)
    # each rule of the five has at least one file breaking that rule alone
    alone = {
        str(items[0]["rule"]) for items in EXPECTED.values() if len({i["rule"] for i in items}) == 1
    }
    assert {
        "schema",
        "reference",
        "single-entry",
        "backward-labeled",
        "fail-fallback-edge",
    } <= alone


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_graph_reports_exactly_the_expected_violations(path: Path) -> None:
    graph, violations = check_graph_file(path, ROLES)
    assert graph is None
    expected = EXPECTED[path.name]
    remaining = list(violations)
    for want in expected:
        match = next(
            (
                v
                for v in remaining
                if v.rule == want["rule"]
                and v.line == want["line"]
                and str(want["detail"]) in v.detail
            ),
            None,
        )
        assert match is not None, f"missing {want} in {[v.as_dict() for v in violations]}"
        remaining.remove(match)
    assert remaining == [], f"unexpected violations: {[v.as_dict() for v in remaining]}"
    # rules are reported in a stable order: schema, reference, then the five rules
    order = [RULES.index(v.rule) for v in violations]
    assert order == sorted(order)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_load_graph_raises_with_every_violation(path: Path) -> None:
    with pytest.raises(GraphError) as caught:
        load_graph(path, ROLES)
    assert caught.value.file == path
    assert len(caught.value.violations) == len(EXPECTED[path.name])
    assert caught.value.exit_code == 2
    for violation in caught.value.violations:
        assert f"[{violation.rule}]" in caught.value.message


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_graph_passes(path: Path) -> None:
    graph = load_graph(path, ROLES)
    assert isinstance(graph, Graph)
    assert check_graph_file(path, None) == (graph, [])
    order = topological_order(graph)
    assert order[0] == entry(graph)
    assert sorted(order) == sorted(n.name for n in graph.nodes)


def test_seed_examples_are_in_the_valid_set() -> None:
    assert {"executor.yaml", "fan-out.yaml", "validator-first.yaml"} <= {p.name for p in VALID}
    triage = load_graph(DATA / "valid" / "validator-first.yaml")
    assert entry(triage) == "validator-triager"
    # the triager has no fail edge on purpose: its failure blocks
    assert fail_edge(triage, "validator-triager", "impl_bug") is None


def test_unknown_roles_are_checked_only_when_roles_are_given() -> None:
    path = INVALID_DIR / "reference-unknown-role.yaml"
    assert check_graph_file(path, None)[1] == []
    assert {v.rule for v in check_graph_file(path, ["lead"])[1]} == {"reference"}


def test_validate_graph_takes_a_parsed_document() -> None:
    text = (INVALID_DIR / "fail-fallback-missing.yaml").read_text()
    document = parse_yaml(text, "x.yaml")
    assert validate_graph(document, Path("x.yaml"), None) == [
        Violation(
            "fail-fallback-edge",
            "node review has fail edges only with a fail_reason (impl_bug, input_underspecified) "
            "and no fallback: add a fail edge without fail_reason, or any other failure leaves "
            "review blocked",
            5,
        )
    ]
    assert validate_graph(parse_yaml((DATA / "valid" / "diamond.yaml").read_text(), "d"), "d") == []


def test_a_backward_self_loop_is_a_valid_retry() -> None:
    graph = load_graph(DATA / "valid" / "rework-loop.yaml")
    retry = fail_edge(graph, "build", "anything")
    assert retry is not None and (retry.from_, retry.to, retry.kind) == (
        "build",
        "build",
        "backward",
    )


def test_schema_errors_do_not_hide_the_graph_rules_they_do_not_touch() -> None:
    # a missing brief is a schema error, the unlabeled loop is still judged
    _, violations = check_graph_text(
        "nodes:\n"
        "  - {name: a, role: lead}\n"
        "  - {name: b, role: lead, brief: B.}\n"
        "edges:\n"
        "  - {from: a, to: b, condition: success}\n"
        "  - {from: b, to: a, condition: fail}\n",
        "g.yaml",
    )
    assert [(v.rule, v.line) for v in violations] == [
        ("schema", 2),
        ("acyclic", 6),
        ("single-entry", 2),
        ("backward-labeled", 6),
    ]


def test_not_utf8_is_a_schema_violation(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_bytes(b"nodes: \xff\xfe\n")
    graph, violations = check_graph_file(path)
    assert graph is None and [v.rule for v in violations] == ["schema"]
    assert "UTF-8" in violations[0].detail


def test_missing_file_raises_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        check_graph_file(tmp_path / "nope.yaml")


# ----------------------------------------------------------------------------- model


def test_edge_from_alias_and_defaults() -> None:
    edge = Edge.model_validate({"from": "a", "to": "b", "condition": "fail"})
    assert edge.from_ == "a" and edge.source == "a" and edge.kind == "forward"
    assert edge.fail_reason is None
    assert edge.model_dump(by_alias=True)["from"] == "a"
    assert Edge(from_="a", to="b", condition="success").describe() == "a -> b (success)"
    back = Edge(from_="b", to="a", condition="fail", fail_reason="impl_bug", kind="backward")
    assert back.describe() == "b -> a (fail: impl_bug, backward)"


def test_json_schema_uses_the_file_format_names_and_documents_fields() -> None:
    schema = json_schema("graph")
    edge = schema["$defs"]["Edge"]
    assert set(edge["properties"]) == {"from", "to", "condition", "fail_reason", "kind"}
    assert edge["additionalProperties"] is False
    assert "Name of the node this edge leaves" in edge["properties"]["from"]["description"]
    assert set(schema["$defs"]["Node"]["properties"]) == {"name", "role", "brief"}
    assert set(schema["properties"]) == {"name", "description", "nodes", "edges"}


# ----------------------------------------------------------------------------- helpers

REWORK = DATA / "valid" / "rework-loop.yaml"
FAN_OUT = DATA / "valid" / "fan-out.yaml"


def test_entry_and_successors() -> None:
    graph = load_graph(FAN_OUT)
    assert entry(graph) == "org-coder-split"
    branches = forward_successors(graph, "org-coder-split", "success")
    assert [e.to for e in branches] == [
        "org-coder-impl-api",
        "org-coder-impl-ui",
        "org-coder-impl-docs",
    ]
    # backward edges are never forward successors
    assert forward_successors(graph, "org-coder-integrate", "fail") == []
    assert forward_successors(graph, "org-coder-validator", "success") == []
    failed = load_graph(DATA / "valid" / "fail-forward.yaml")
    assert [e.to for e in forward_successors(failed, "deploy", "fail")] == ["rollback"]


def test_entry_raises_without_exactly_one() -> None:
    graph = Graph.model_validate(
        {
            "nodes": [
                {"name": "a", "role": "r", "brief": "A."},
                {"name": "b", "role": "r", "brief": "B."},
            ]
        }
    )
    with pytest.raises(ValueError, match="exactly one entry"):
        entry(graph)


def test_fail_edge_exact_reason_then_fallback_then_none() -> None:
    graph = load_graph(REWORK)
    to_build = fail_edge(graph, "review", "impl_bug")
    assert to_build is not None and to_build.to == "build" and to_build.fail_reason == "impl_bug"
    to_plan = fail_edge(graph, "review", "input_underspecified")
    assert to_plan is not None and to_plan.to == "plan"
    fallback = fail_edge(graph, "review", "skill_defect")
    assert fallback is not None and fallback.to == "build" and fallback.fail_reason is None
    assert fail_edge(graph, "review", None) == fallback
    assert fail_edge(graph, "plan", "impl_bug") is None  # no fail edge: the node is blocked


def test_forward_predecessors_of_a_join() -> None:
    graph = load_graph(DATA / "valid" / "diamond.yaml")
    assert forward_predecessors(graph, "review") == ["backend", "frontend"]
    assert forward_predecessors(graph, "plan") == []
    rework = load_graph(REWORK)
    assert forward_predecessors(rework, "build") == ["plan"]  # backward edges do not count


def test_topological_order_breaks_ties_by_file_order() -> None:
    assert topological_order(load_graph(FAN_OUT)) == [
        "org-coder-split",
        "org-coder-impl-api",
        "org-coder-impl-ui",
        "org-coder-impl-docs",
        "org-coder-integrate",
        "org-coder-validator",
    ]
    assert topological_order(load_graph(REWORK)) == ["plan", "build", "test", "review"]


def test_topological_order_raises_on_a_cycle() -> None:
    graph = Graph.model_validate(
        {
            "nodes": [{"name": n, "role": "r", "brief": "x"} for n in ("a", "b")],
            "edges": [
                {"from": "a", "to": "b", "condition": "success"},
                {"from": "b", "to": "a", "condition": "success"},
            ],
        }
    )
    with pytest.raises(ValueError, match="cycle"):
        topological_order(graph)


def test_edges_may_be_left_empty() -> None:
    graph = _graph("nodes:\n  - {name: a, role: lead, brief: Do A.}\nedges:\n")
    assert graph.edges == [] and entry(graph) == "a"


def test_get_node() -> None:
    graph = _graph("nodes:\n  - {name: a, role: lead, brief: Do A.}\n")
    assert get_node(graph, "a").brief == "Do A."
    with pytest.raises(KeyError):
        get_node(graph, "b")


# ----------------------------------------------------------------------------- CLI


def _args(
    file: str | Path, *, as_json: bool = False, project: str | None = None
) -> argparse.Namespace:
    return argparse.Namespace(file=str(file), json=as_json, project=project)


CREW = """\
mode: graph
roles:
  lead: {profile: scripted}
  builder: {profile: scripted}
  reviewer: {profile: scripted}
"""


def _project_with_graph(project: Path, name: str, source: Path) -> Path:
    """Copy a graph into the project, whose crew is set to exactly lead, builder, reviewer."""
    (project / ".agent-box" / "crew.yaml").write_text(CREW)
    target = project / ".agent-box" / "graphs" / f"{name}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    return target


def test_cli_ok(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no project: roles are not checked
    path = DATA / "valid" / "executor.yaml"
    assert graph_check(_args(path)) == 0
    assert capsys.readouterr().out == f"ok: {path} (3 nodes, 4 edges; entry org-coder-impl)\n"


def test_cli_invalid_prints_every_violation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = INVALID_DIR / "acyclic-loop-to-entry.yaml"
    assert graph_check(_args(path)) == 2
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines == [
        f"{path}:8: [acyclic] forward edges form a cycle: impl -> test -> impl "
        "(closed by test -> impl (fail))",
        f"{path}:4: [single-entry] no entry node: every node has a forward in-edge "
        "(impl is entered from test); an edge back to the entry must be kind: backward",
        f"{path}:8: [backward-labeled] edge test -> impl (fail) points back to impl, "
        "which comes before test along forward edges: mark it kind: backward",
    ]
    assert "3 violation(s)" in captured.err


def test_cli_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert graph_check(_args(INVALID_DIR / "reference-duplicate-node.yaml", as_json=True)) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    assert report["violations"] == [
        {
            "rule": "reference",
            "detail": "duplicate node name 'build' (first defined at line 3)",
            "line": 4,
        }
    ]
    assert graph_check(_args(DATA / "valid" / "diamond.yaml", as_json=True)) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True and report["violations"] == []
    assert (report["entry"], report["nodes"], report["edges"]) == ("plan", 4, 4)


def test_cli_resolves_a_name_and_checks_the_crew_roles(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _project_with_graph(project, "build", DATA / "valid" / "diamond.yaml")
    _project_with_graph(project, "seed", DATA / "valid" / "executor.yaml")
    monkeypatch.chdir(project)
    assert graph_check(_args("build")) == 0
    assert "entry plan" in capsys.readouterr().out
    assert graph_check(_args("seed")) == 2
    out = capsys.readouterr().out
    assert out.count("[reference]") == 3 and "unknown role 'coder'" in out
    # --project from elsewhere, name with its suffix
    monkeypatch.chdir(project.parent)
    assert graph_check(_args("build.yaml", project=str(project))) == 0
    # relative to .agent-box/, as crew.yaml's graph.file
    assert graph_check(_args("graphs/build.yaml", project=str(project))) == 0
    assert resolve_graph("graphs/build.yaml", ProjectPaths(project)) == (
        project / ".agent-box" / "graphs" / "build.yaml"
    )


def test_cli_uses_the_project_holding_the_file(
    project: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = _project_with_graph(project, "seed", DATA / "valid" / "executor.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert graph_check(_args(path)) == 2
    assert "unknown role 'coder'" in capsys.readouterr().out


def test_cli_unknown_graph_is_a_usage_error(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _project_with_graph(project, "build", DATA / "valid" / "diamond.yaml")
    monkeypatch.chdir(project)
    with pytest.raises(NotFoundError) as caught:
        graph_check(_args("nope"))
    assert caught.value.exit_code == 2
    assert "build" in str(caught.value.hint)
    with pytest.raises(NotFoundError):
        resolve_graph("nope", ProjectPaths(project))


def test_cli_with_a_broken_crew_warns_and_skips_roles(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _project_with_graph(project, "seed", DATA / "valid" / "executor.yaml")
    (project / ".agent-box" / "crew.yaml").write_text("roles: [not, a, mapping]\n")
    monkeypatch.chdir(project)
    assert graph_check(_args("seed")) == 0
    assert "role names are not checked" in capsys.readouterr().err


# CLI route: needs parser -> agentbox.cli.graph
def test_cli_through_the_real_entry_point(project: Path) -> None:
    _project_with_graph(project, "rework", DATA / "valid" / "rework-loop.yaml")
    ok = run_cli("graph", "check", "rework", cwd=project)
    assert (ok.code, ok.err) == (0, "")
    assert ok.out.startswith("ok: ") and "(4 nodes, 8 edges; entry plan)" in ok.out

    bad = run_cli("graph", "check", str(INVALID_DIR / "multi-rule.yaml"), "--json", cwd=project)
    assert bad.code == 2, bad.err
    report = json.loads(bad.out)
    assert report["valid"] is False
    # the crew has no role `tester`: the reference rule reports it too
    assert {v["rule"] for v in report["violations"]} == {
        "reference",
        "acyclic",
        "single-entry",
        "backward-labeled",
        "fail-fallback-edge",
    }

    missing = run_cli("graph", "check", "nope", cwd=project)
    assert missing.code == 2 and "Traceback" not in missing.err
    assert "no work graph 'nope'" in missing.err

    broken = run_cli("graph", "check", str(INVALID_DIR / "schema-malformed-yaml.yaml"), cwd=project)
    assert broken.code == 2 and "Traceback" not in broken.err
    assert "schema-malformed-yaml.yaml:3: [schema] malformed YAML" in broken.out
