"""Structured replies: extraction, the models, the verdict and plan rules, re-prompts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from agentbox.core.engine.replies import (
    FORMAT_HINTS,
    REPLY_MODELS,
    Acceptance,
    BlockingIssue,
    ChatTurn,
    ChecklistItem,
    Handoff,
    Plan,
    PlannedTask,
    ReplyError,
    Submission,
    Verdict,
    corrective_prompt,
    extract_json,
    parse_reply,
)
from agentbox.core.engine.reply_rules import check_plan, check_verdict

# ------------------------------------------------------------------------- extraction


def test_extract_fenced_block() -> None:
    text = 'Done.\n```json\n{"summary": "ok", "evidence": ["pytest: 3 passed"]}\n```\nBye.'
    assert extract_json(text) == {"summary": "ok", "evidence": ["pytest: 3 passed"]}


def test_extract_prefers_the_last_fenced_block_over_bare_objects() -> None:
    text = (
        'Example: ```json\n{"summary": "example"}\n```\n'
        'Mine:\n```JSON\n{"summary": "mine"}\n```\n'
        'and a stray {"summary": "bare"}'
    )
    assert extract_json(text) == {"summary": "mine"}


def test_extract_bare_object_in_prose() -> None:
    assert extract_json('Here you go: {"a": 1} -- thanks') == {"a": 1}


def test_extract_bare_object_with_braces_inside_strings() -> None:
    text = 'Result: {"detail": "use {x} and \\"}\\" carefully", "nested": {"k": [1, {"z": "}"}]}}'
    assert extract_json(text) == {
        "detail": 'use {x} and "}" carefully',
        "nested": {"k": [1, {"z": "}"}]},
    }


def test_extract_multiple_objects_takes_the_last_top_level_one() -> None:
    text = 'first {"n": 1}, then {"n": 2, "inner": {"n": 3}} and done'
    assert extract_json(text) == {"n": 2, "inner": {"n": 3}}


def test_extract_skips_prose_braces_and_broken_objects() -> None:
    text = 'In code: if (x) { y(); } and {"broken": } then {"ok": true} end {'
    assert extract_json(text) == {"ok": True}


def test_prose_mentioning_a_json_block_is_not_a_fence() -> None:
    assert extract_json('I was told to use a ```json block. {"a": 1}') == {"a": 1}


def test_extract_untagged_fence_is_found_as_a_bare_object() -> None:
    assert extract_json('```\n{"a": [1, 2]}\n```') == {"a": [1, 2]}


@pytest.mark.parametrize("text", ["", "no json here", "[1, 2, 3]", "{not json}", '{"a": 1'])
def test_extract_nothing_is_an_error(text: str) -> None:
    with pytest.raises(ReplyError) as info:
        extract_json(text)
    assert info.value.reasons == [
        "no JSON object found in the reply; end it with one JSON object in a ```json block"
    ]


def test_extract_invalid_fenced_block_says_where() -> None:
    with pytest.raises(ReplyError, match=r"not valid JSON: .* at line 2 column"):
        extract_json('```json\n{"a": 1,\n }\n```\n{"b": 2}')


def test_extract_fenced_non_object_is_an_error() -> None:
    with pytest.raises(ReplyError, match="holds a JSON list, not an object"):
        extract_json("```json\n[1]\n```")


# ----------------------------------------------------------------------------- models

TASK: dict[str, Any] = {
    "id": "api-1", "assignee": "builder", "brief": "Add /health",
    "acceptance": [{"id": "A1", "criterion": "GET /health answers 200"}],
}

VALID: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (Acceptance, {"id": "A1", "criterion": "it works"}),
    (PlannedTask, TASK),
    (PlannedTask, {**TASK, "writes": ["src/**", "README.md"], "depends_on": ["db"]}),
    (Plan, {"tasks": [TASK]}),
    (Plan, {"tasks": [TASK], "notes": "small job"}),
    (Submission, {"summary": "done"}),
    (Submission, {"summary": "done", "artifacts": ["a.txt"], "evidence": ["ok"], "question": None}),
    (BlockingIssue, {"id": "B1", "severity": "minor", "detail": "typo"}),
    (ChecklistItem, {"item": "x", "acceptance_id": "A1", "pass": True, "evidence": "seen"}),
    (Verdict, {"verdict": "approve", "checklist": [], "confidence": 1}),
    (Handoff, {"action": "answer", "message": "42"}),
    (Handoff, {"action": "handoff", "to": "reviewer", "message": "over to you"}),
    (ChatTurn, {"message": "hi"}),
    (ChatTurn, {"message": "bye", "next_speaker": "lead", "done": True}),
]


@pytest.mark.parametrize(("model", "data"), VALID, ids=lambda v: getattr(v, "__name__", ""))
def test_valid_models(model: type[BaseModel], data: dict[str, Any]) -> None:
    model.model_validate(data)


INVALID: list[tuple[type[BaseModel], dict[str, Any], str]] = [
    (Acceptance, {"id": "A1"}, "criterion: required field is missing"),
    (PlannedTask, {**TASK, "id": "bad id"}, "id: String should match pattern"),
    (PlannedTask, {**TASK, "id": "-x"}, "id: String should match pattern"),
    (PlannedTask, {**TASK, "acceptance": []}, "acceptance: must not be empty"),
    (PlannedTask, {**TASK, "writes": ["/etc/**"]}, "writes: '/etc/**' is not a glob relative"),
    (PlannedTask, {**TASK, "writes": ["../x"]}, "writes: '../x' is not a glob relative"),
    (PlannedTask, {**TASK, "owner": "x"}, "owner: unknown key; valid keys: id, assignee, brief"),
    (PlannedTask, {**TASK, "brief": "   "}, "brief: must not be empty"),
    (Plan, {"tasks": []}, "tasks: must not be empty"),
    (Plan, {"tasks": [{**TASK, "acceptance": [{"id": "A1"}]}]},
     "tasks[0].acceptance[0].criterion: required field is missing"),
    (Submission, {"summary": ""}, "summary: must not be empty"),
    (Submission, {"artifacts": []}, "summary: required field is missing"),
    (BlockingIssue, {"id": "B1", "severity": "high", "detail": "x"},
     "severity: invalid value 'high'; allowed: 'blocker', 'major' or 'minor'"),
    (ChecklistItem, {"item": "x", "acceptance_id": "A1", "pass": "maybe"}, "pass: Input should be a valid boolean"),
    (ChecklistItem, {"item": "x", "acceptance_id": "A1", "pass": True, "evidence_uri": "u"},
     "evidence_uri: unknown key; valid keys: item, acceptance_id, pass, evidence"),
    (Verdict, {"verdict": "accept", "checklist": [], "confidence": 0.5}, "verdict: invalid value 'accept'; allowed: 'approve' or 'reject'"),
    (Verdict, {"verdict": "approve", "checklist": [], "confidence": 1.5}, "confidence: Input should be less than or equal to 1"),
    (Verdict, {"verdict": "approve", "confidence": 1}, "checklist: required field is missing"),
    (Handoff, {"action": "handoff", "message": "m"}, "(reply): a handoff needs `to`"),
    (Handoff, {"action": "shout", "message": "m"}, "action: invalid value 'shout'; allowed: 'answer' or 'handoff'"),
    (ChatTurn, {"message": "m", "done": "perhaps"}, "done: Input should be a valid boolean"),
]


@pytest.mark.parametrize(("model", "data", "reason"), INVALID, ids=lambda v: getattr(v, "__name__", ""))
def test_invalid_models_give_readable_reasons(model: type[BaseModel], data: dict[str, Any], reason: str) -> None:
    with pytest.raises(ReplyError) as info:
        parse_reply(model, f"```json\n{json.dumps(data)}\n```")
    assert any(r.startswith(reason) for r in info.value.reasons), info.value.reasons


def test_parse_reply_collects_every_reason() -> None:
    text = '{"tasks": [{"id": "a", "assignee": "x", "brief": "", "acceptance": []}], "extra": 1}'
    with pytest.raises(ReplyError) as info:
        parse_reply(Plan, text)
    assert info.value.reasons == [
        "tasks[0].brief: must not be empty",
        "tasks[0].acceptance: must not be empty",
        "extra: unknown key; valid keys: tasks, notes",
    ]


def test_parse_reply_returns_the_model() -> None:
    sub = parse_reply(Submission, 'ok: {"summary": " done ", "question": "  "}')
    assert sub.summary == "done"
    assert sub.question is None


def test_checklist_pass_alias_round_trips() -> None:
    item = ChecklistItem.model_validate({"item": "x", "acceptance_id": "A1", "pass": True, "evidence": "e"})
    assert item.pass_ is True
    assert item.model_dump(by_alias=True)["pass"] is True


# ----------------------------------------------------------------------- check_verdict


def _verdict(verdict: str, items: list[tuple[str, bool, str]], issues: list[tuple[str, str | None, str]] = ()) -> Verdict:  # type: ignore[assignment]
    return Verdict.model_validate({
        "verdict": verdict,
        "checklist": [{"item": f"check {a}", "acceptance_id": a, "pass": p, "evidence": e} for a, p, e in items],
        "blocking_issues": [{"id": i, "acceptance_id": a, "severity": s, "detail": "fix it"} for i, a, s in issues],
        "confidence": 0.9,
    })


def test_sound_approve_and_reject() -> None:
    assert check_verdict(_verdict("approve", [("A1", True, "pytest ok"), ("A2", True, "read app.py")]), ["A1", "A2"]) == []
    assert check_verdict(_verdict("approve", [("A1", True, "ok")], [("B1", "A1", "minor")]), ["A1"]) == []
    assert check_verdict(_verdict("reject", [("A1", False, "")]), ["A1"]) == []
    assert check_verdict(_verdict("reject", [("A1", True, "ok")], [("B1", None, "major")]), ["A1"]) == []


def test_checklist_must_cover_every_acceptance_id() -> None:
    problems = check_verdict(_verdict("approve", [("A1", True, "ok")]), ["A1", "A2", "A3"])
    assert problems == [
        "checklist does not cover acceptance ids: A2, A3; add one item per acceptance criterion"
    ]


def test_empty_checklist_is_not_an_always_pass() -> None:
    assert check_verdict(_verdict("approve", []), ["A1"]) != []


def test_passing_item_needs_evidence() -> None:
    problems = check_verdict(_verdict("approve", [("A1", True, "  ")]), ["A1"])
    assert problems == ["checklist[0] (A1): passes without evidence; say what you ran or read that shows it"]


def test_approve_with_a_failing_item_is_invalid() -> None:
    problems = check_verdict(_verdict("approve", [("A1", True, "ok"), ("A2", False, "broken")]), ["A1", "A2"])
    assert problems == ["verdict is approve but checklist[1] (A2) fails; reject, or re-check the item"]


@pytest.mark.parametrize(("severity", "refused"), [("blocker", True), ("major", True), ("minor", False)])
def test_approve_with_a_serious_issue_is_invalid(severity: str, refused: bool) -> None:
    problems = check_verdict(_verdict("approve", [("A1", True, "ok")], [("B1", "A1", severity)]), ["A1"])
    assert bool(problems) is refused
    if refused:
        assert problems[0].startswith(f"verdict is approve but blocking issue 'B1' is {severity}")


def test_reject_without_a_reason_is_invalid() -> None:
    problems = check_verdict(_verdict("reject", [("A1", True, "ok")]), ["A1"])
    assert problems == [
        "verdict is reject but no checklist item fails and no blocking issue is listed; say what must change"
    ]


def test_unknown_acceptance_ids_are_reported() -> None:
    verdict = _verdict("reject", [("A1", False, ""), ("Z9", True, "ok")], [("B1", "Q1", "major"), ("B1", None, "minor")])
    problems = check_verdict(verdict, ["A1"])
    assert "checklist[1]: unknown acceptance id 'Z9'; the task's acceptance ids are: A1" in problems
    assert "blocking_issues[0]: unknown acceptance id 'Q1'; the task's acceptance ids are: A1" in problems
    assert "blocking_issues[1]: duplicate issue id 'B1'" in problems


# -------------------------------------------------------------------------- check_plan


def _plan(*tasks: dict[str, Any]) -> Plan:
    return Plan.model_validate({"tasks": [
        {"brief": "do it", "acceptance": [{"id": "A1", "criterion": "done"}], "assignee": "builder", **t}
        for t in tasks
    ]})


ROLES = ["builder", "reviewer", "lead"]


def test_sound_plan() -> None:
    plan = _plan({"id": "a"}, {"id": "b", "depends_on": ["a"]}, {"id": "c", "depends_on": ["a", "b", "old"]})
    assert check_plan(plan, ROLES, existing_task_ids=["old"]) == []


def test_unknown_assignee_lists_the_roles() -> None:
    assert check_plan(_plan({"id": "a", "assignee": "bob"}), ROLES) == [
        "task 'a': unknown assignee 'bob'; roles: builder, lead, reviewer"
    ]


def test_duplicate_task_ids_and_acceptance_ids() -> None:
    plan = _plan(
        {"id": "a"},
        {"id": "a", "acceptance": [{"id": "A1", "criterion": "x"}, {"id": "A1", "criterion": "y"}]},
    )
    assert check_plan(plan, ROLES) == [
        "duplicate task id 'a' (tasks[0] and tasks[1])",
        "task 'a': duplicate acceptance id 'A1'",
    ]


def test_reusing_an_existing_task_id_is_refused() -> None:
    assert check_plan(_plan({"id": "a"}), ROLES, existing_task_ids={"a"}) == [
        "task 'a': id already used by an existing task of this run"
    ]


def test_unknown_and_self_dependencies() -> None:
    plan = _plan({"id": "a", "depends_on": ["a", "ghost"]}, {"id": "b"})
    assert check_plan(plan, ROLES) == [
        "task 'a': depends on itself",
        "task 'a': depends on unknown task 'ghost'; known tasks: a, b",
    ]


def test_cycle_is_named_with_its_path() -> None:
    plan = _plan({"id": "a", "depends_on": ["b"]}, {"id": "b", "depends_on": ["a"]})
    assert check_plan(plan, ROLES) == ["dependency cycle: a -> b -> a"]


def test_longer_cycles_are_each_reported_once() -> None:
    plan = _plan(
        {"id": "a", "depends_on": ["b"]},
        {"id": "b", "depends_on": ["c"]},
        {"id": "c", "depends_on": ["a"]},
        {"id": "d", "depends_on": ["a", "e"]},
        {"id": "e", "depends_on": ["d"]},
    )
    assert check_plan(plan, ROLES) == [
        "dependency cycle: a -> b -> c -> a",
        "dependency cycle: d -> e -> d",
    ]


# -------------------------------------------------------------------- prompts to agents


def test_corrective_prompt_mentions_every_reason_and_the_shape() -> None:
    reasons = ["summary: required field is missing", "owner: unknown key"]
    prompt = corrective_prompt(Submission, reasons)
    for reason in reasons:
        assert f"- {reason}" in prompt
    assert "Submission" in prompt
    shape = prompt.split("```json\n", 1)[1].split("\n```", 1)[0]
    Submission.model_validate(json.loads(shape))


def test_corrective_prompt_for_a_nested_model_falls_back_to_the_schema() -> None:
    prompt = corrective_prompt(PlannedTask, ["id: bad"])
    assert '"properties"' in prompt


@pytest.mark.parametrize("model", REPLY_MODELS, ids=lambda m: m.__name__)
def test_format_hint_examples_are_valid(model: type[BaseModel]) -> None:
    hint = FORMAT_HINTS[model.__name__]
    body = hint.split("```json\n", 1)[1].rsplit("\n```", 1)[0]
    parse_reply(model, hint)
    model.model_validate(json.loads(body))


def test_format_hint_examples_pass_the_rules() -> None:
    plan = parse_reply(Plan, FORMAT_HINTS["Plan"])
    assert check_plan(plan, ["builder", "writer"]) == []
    verdict = parse_reply(Verdict, FORMAT_HINTS["Verdict"])
    assert check_verdict(verdict, ["A1", "A2"]) == []


def test_every_field_is_documented() -> None:
    for model in (Acceptance, PlannedTask, Plan, Submission, BlockingIssue, ChecklistItem, *REPLY_MODELS):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no docstring"


def test_long_dependency_chains_do_not_hit_the_recursion_limit() -> None:
    plan = _plan(*({"id": f"t{i}", "depends_on": [f"t{(i + 1) % 3000}"]} for i in range(3000)))
    (problem,) = check_plan(plan, ROLES)
    assert problem.startswith("dependency cycle: t0 -> t1 -> t2") and problem.endswith("t2999 -> t0")
