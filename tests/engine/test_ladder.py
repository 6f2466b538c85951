"""The failure ladder as a pure state machine: every transition of (state, event) -> decision."""

from __future__ import annotations

import pytest

from agentbox.core.engine import ladder_model as L
from agentbox.core.engine.ladder import advisor_delivered, decide
from agentbox.core.engine.ladder_briefs import (
    PlanEntry,
    classify_brief_change,
    coverage_gap,
    rework_prompt_head,
    rewrite_prompt_head,
    root_cause_problem,
)
from agentbox.core.engine.ladder_model import (
    BriefChange,
    BriefReplied,
    CoverageGap,
    EnvironmentFailed,
    Failed,
    HumanAnswered,
    HumanCancelled,
    LadderPolicy,
    LadderState,
    Level,
    Mode,
    Passed,
    Question,
    UpstreamNotReady,
)

REWRITE = BriefReplied(BriefChange("rewrite", why="the brief changed"))
FILL = BriefReplied(BriefChange("fill", ("A2",)))


def walk(*events, state=None, policy=None):
    """Feed `events` in order; the decisions."""
    state = state or LadderState()
    decisions = []
    for event in events:
        decision = decide(state, event, policy)
        decisions.append(decision)
        state = decision.state
    return decisions


def last(*events, **kw):
    return walk(*events, **kw)[-1]


# ----------------------------------------------------------------------------- filter first


@pytest.mark.parametrize("event, action", [
    (CoverageGap(("A2", "A3")), L.AskLeadToFill(("A2", "A3"))),
    (UpstreamNotReady("api", "its schema lacks /health"), L.Block("api")),
])
def test_filtered_failures_are_never_counted(event, action):
    before = LadderState(counted_failures=1, last_fingerprint="fp-a")
    decision = decide(before, event)
    assert decision.action == action
    assert not decision.counted
    assert decision.state == before  # no level, count or history moved


def test_environment_backoff_1_4_16_with_jitter_then_a_checkpoint():
    events = [EnvironmentFailed("timeout", "env", jitter_sample=0.5)] * 4
    decisions = walk(*events)
    assert [d.action for d in decisions[:3]] == [L.RetryAfter(1.0, 1), L.RetryAfter(4.0, 2), L.RetryAfter(16.0, 3)]
    assert isinstance(decisions[3].action, L.Ask) and decisions[3].action.question == Question.ENVIRONMENT
    assert not any(d.counted for d in decisions)
    assert decisions[3].state.counted_failures == 0 and decisions[3].state.history == []


@pytest.mark.parametrize("sample, delay", [(0.0, 0.8), (0.5, 1.0), (0.999999, 1.2)])
def test_environment_jitter_stays_within_twenty_percent(sample, delay):
    assert last(EnvironmentFailed("killed", "env", jitter_sample=sample)).action.delay_s == pytest.approx(delay, abs=1e-4)


@pytest.mark.parametrize("error", ["not_found", "not_executable", "sandbox", "parse_error"])
def test_an_environment_error_waiting_does_not_fix_is_asked_at_once(error):
    decision = last(EnvironmentFailed(error, "env"))
    assert isinstance(decision.action, L.Ask) and decision.action.question == Question.ENVIRONMENT
    assert decision.state.waiting_on == Question.ENVIRONMENT and decision.state.environment_attempt == 0


def test_environment_waiting_is_capped_per_task_across_streaks():
    policy = LadderPolicy(environment_budget_s=100)
    state = LadderState(environment_waited_s=97)
    decisions = walk(EnvironmentFailed("timeout", "e"), EnvironmentFailed("timeout", "e"), state=state, policy=policy)
    assert decisions[0].action == L.RetryAfter(1.0, 1)  # 97 + 1 <= 100
    assert isinstance(decisions[1].action, L.Ask)  # 98 + 4 > 100: the human is asked
    assert decisions[1].state.environment_waited_s == pytest.approx(98)


def test_any_other_event_ends_an_environment_streak():
    decisions = walk(EnvironmentFailed("timeout", "e"), EnvironmentFailed("timeout", "e"), Failed("fp-a"),
                     EnvironmentFailed("timeout", "e"))
    assert decisions[2].state.environment_attempt == 0
    assert decisions[3].action == L.RetryAfter(1.0, 1)  # the streak starts again at 1 s
    assert decisions[3].state.environment_waited_s == pytest.approx(6.0)  # the task's total is kept


def test_retry_answer_to_the_environment_question_restarts_the_turn():
    decisions = walk(EnvironmentFailed("not_found", "e"), HumanAnswered("retry"))
    assert decisions[1].action == L.RetryAfter(0.0, 1)
    assert decisions[1].state.waiting_on is None


def test_a_person_answering_retry_gives_the_task_a_fresh_environment_budget():
    state = LadderState(environment_waited_s=299.5)
    asked = decide(state, EnvironmentFailed("timeout", "e"))
    assert isinstance(asked.action, L.Ask)  # 299 + 1 s > 5 minutes
    retried = decide(asked.state, HumanAnswered("retry"))
    assert retried.state.environment_waited_s == 0
    assert decide(retried.state, EnvironmentFailed("timeout", "e")).action == L.RetryAfter(1.0, 1)


# ----------------------------------------------------------------------------- the levels


def test_the_first_counted_failure_registers_its_fingerprint_at_l0():
    decision = last(Failed("fp-a"))
    assert decision.counted and decision.action == L.Rework(Mode.NORMAL)
    assert decision.state.level == Level.L0 and decision.state.last_fingerprint == "fp-a"
    [step] = decision.state.history
    assert (step.from_level, step.to_level, step.fingerprint) == (Level.L0, Level.L0, "fp-a")


def test_same_fingerprint_is_l1_one_automatic_rewrite():
    decision = last(Failed("fp-a", at=1), Failed("fp-a", at=2))
    assert decision.action == L.RequestRewrite(automatic=True)
    state = decision.state
    assert state.level == Level.L1 and state.rewrite_pending and state.rewrite_automatic
    assert state.history[-1].model_dump() == {"from_level": Level.L0, "to_level": Level.L1, "from_mode": Mode.NORMAL,
                                              "to_mode": Mode.NORMAL, "fingerprint": "fp-a", "at": 2.0,
                                              "why": "the same failure again: the lead rewrites the brief"}


def test_the_second_rewrite_needs_the_human_and_the_third_failure_is_intercepted():
    decisions = walk(Failed("fp-a"), Failed("fp-a"), REWRITE, Failed("fp-a"), HumanAnswered("rewrite"), REWRITE,
                     Failed("fp-a"))
    assert decisions[2].state.rewrites_auto == 1 and decisions[2].state.rewrites_total == 1
    ask = decisions[3].action
    assert isinstance(ask, L.Ask) and ask.question == Question.SECOND_REWRITE
    assert decisions[3].state.waiting_on == Question.SECOND_REWRITE
    assert decisions[4].action == L.RequestRewrite(automatic=False)
    assert decisions[5].state.rewrites_auto == 1 and decisions[5].state.rewrites_total == 2  # the human's is not automatic
    final = decisions[6]
    assert isinstance(final.action, L.HighRot) and final.state.level == Level.L3
    assert final.state.mode == Mode.HIGH_ROT and final.state.waiting_on == Question.EXIT
    assert "L1 is exhausted" in final.state.history[-1].why


def test_l1_exhausted_intercepts_a_different_fingerprint_too():
    state = LadderState(level=Level.L1, counted_failures=3, last_fingerprint="fp-a", rewrites_auto=1, rewrites_total=2)
    decision = decide(state, Failed("fp-b"))
    assert isinstance(decision.action, L.HighRot) and decision.state.level == Level.L3


def test_a_rewrite_cannot_be_allowed_past_the_total():
    state = LadderState(level=Level.L1, counted_failures=3, last_fingerprint="fp-a", rewrites_auto=1,
                        rewrites_total=2, waiting_on=Question.SECOND_REWRITE)
    assert isinstance(decide(state, HumanAnswered("rewrite")).action, L.Refuse)


def test_a_coverage_fill_is_not_counted_as_a_rewrite():
    decisions = walk(Failed("fp-a"), Failed("fp-a"), FILL)
    assert decisions[2].action == L.UseBrief(counted=False)
    assert decisions[2].state.rewrites_total == 0 and decisions[2].state.rewrites_auto == 0


@pytest.mark.parametrize("reply, reason", [
    (BriefReplied(BriefChange("unchanged")), "same as the old one"),
    (BriefReplied(BriefChange("rewrite"), root_cause_problem="the root cause is missing"), "root-cause line"),
])
def test_a_rewrite_without_evidence_or_change_is_refused_and_not_counted(reply, reason):
    decision = last(Failed("fp-a"), Failed("fp-a"), reply)
    assert isinstance(decision.action, L.Refuse) and reason in decision.action.reason
    assert decision.state.rewrites_total == 0 and decision.state.rewrite_pending


@pytest.mark.parametrize("prefix", [
    [Failed("fp-a")],                                   # L0 -> drift
    [Failed("fp-a"), Failed("fp-a"), REWRITE],           # L1 -> drift
])
def test_a_different_fingerprint_is_l2_compromise(prefix):
    decision = last(*prefix, Failed("fp-b", paths=("src/app.py",)))
    assert decision.action == L.Rework(Mode.COMPROMISE)
    assert decision.state.level == Level.L2 and decision.state.mode == Mode.COMPROMISE
    assert decision.state.escape_hatches_used == ["compromise"]
    assert decision.state.last_fingerprint == "fp-b"


@pytest.mark.parametrize("paths, mode", [
    (("payments/charge.py",), Mode.ADVISOR),
    (("src/auth/login.py",), Mode.COMPROMISE),   # `auth/**` is rooted at the project
    (("auth",), Mode.ADVISOR),
    (("migrations/0001.sql", "src/x.py"), Mode.ADVISOR),
    ((), Mode.COMPROMISE),
    (("payments",), Mode.ADVISOR),
    (("payments_v2/x.py",), Mode.COMPROMISE),    # a longer name is not the directory
])
def test_no_compromise_paths_go_from_drift_straight_to_advisor(paths, mode):
    policy = LadderPolicy(no_compromise=("auth/**", "payments/**", "migrations/**"))
    decision = last(Failed("fp-a"), Failed("fp-b", paths=paths), policy=policy)
    assert decision.action == L.Rework(mode) and decision.state.level == Level.L2


def test_compromise_failing_is_advisor_and_advisor_failing_is_l3():
    decisions = walk(Failed("fp-a"), Failed("fp-b"), Failed("fp-c"), Failed("fp-c"))
    assert decisions[2].action == L.Rework(Mode.ADVISOR) and decisions[2].state.level == Level.L2
    assert decisions[2].state.escape_hatches_used == ["compromise", "advisor"]
    assert isinstance(decisions[3].action, L.HighRot) and decisions[3].state.level == Level.L3
    levels = [(t.from_level, t.to_level, t.to_mode) for t in decisions[3].state.history]
    assert levels == [(Level.L0, Level.L0, Mode.NORMAL), (Level.L0, Level.L2, Mode.COMPROMISE),
                      (Level.L2, Level.L2, Mode.ADVISOR), (Level.L2, Level.L3, Mode.HIGH_ROT)]


def test_the_advisor_patch_is_offered_then_applied():
    state = last(Failed("fp-a"), Failed("fp-b"), Failed("fp-c")).state
    offered = advisor_delivered(state)
    assert isinstance(offered.action, L.Ask) and offered.action.question == Question.APPLY_PATCH
    applied = decide(offered.state, HumanAnswered("apply"))
    assert applied.action == L.ApplyPatch() and applied.state.waiting_on is None
    assert decide(applied.state, Passed()).action == L.Proceed()
    assert isinstance(decide(applied.state, Failed("fp-c")).action, L.HighRot)  # re-enters at the next level
    assert isinstance(advisor_delivered(LadderState()).action, L.Refuse)


@pytest.mark.parametrize("tags, action", [(0, L.Refuse), (2, L.RecordDebt)])
def test_a_compromise_pass_needs_the_debt_tag(tags, action):
    state = last(Failed("fp-a"), Failed("fp-b")).state
    assert isinstance(decide(state, Passed(debt_tags=tags)).action, action)


def test_a_normal_pass_proceeds():
    assert decide(LadderState(), Passed(debt_tags=0)).action == L.Proceed()


# ----------------------------------------------------------------------------- L3 exits


def at_l3():
    return last(Failed("fp-a"), Failed("fp-b"), Failed("fp-c"), Failed("fp-c")).state


@pytest.mark.parametrize("answer, action, mode", [
    ("controlled_rewrite", L.ControlledRewrite(), Mode.CLOSED),
    ("bypass", L.Bypass(), Mode.CLOSED),
    ("abandon", L.Cancel(abandoned=True), Mode.CLOSED),
])
def test_l3_exits(answer, action, mode):
    decision = decide(at_l3(), HumanAnswered(answer))
    assert decision.action == action and decision.state.mode == mode
    assert decision.state.escape_hatches_used[-1] == answer and decision.state.waiting_on is None
    assert decision.state.level == Level.L3


def test_advisor_again_needs_new_information():
    refused = decide(at_l3(), HumanAnswered("advisor_again"))
    assert isinstance(refused.action, L.Refuse) and "new information" in refused.action.reason
    same = decide(at_l3(), HumanAnswered("advisor_again", new_information="fp-c"))
    assert isinstance(same.action, L.Refuse)
    again = decide(at_l3(), HumanAnswered("advisor_again", new_information="the db schema is in docs/schema.sql"))
    assert again.action == L.Rework(Mode.ADVISOR) and again.state.mode == Mode.ADVISOR
    assert isinstance(decide(again.state, Failed("fp-d")).action, L.HighRot)


def test_advisor_again_without_an_earlier_advisor_round_needs_nothing_new():
    state = decide(LadderState(level=Level.L1, counted_failures=3, last_fingerprint="fp-a", rewrites_total=2),
                   Failed("fp-a")).state
    assert decide(state, HumanAnswered("advisor_again")).action == L.Rework(Mode.ADVISOR)


def test_overdue_debt_blocks_a_controlled_rewrite():
    decision = decide(at_l3(), HumanAnswered("controlled_rewrite", overdue_debts=("D-3",)))
    assert isinstance(decision.action, L.Refuse) and "D-3" in decision.action.reason
    assert decision.state.waiting_on == Question.EXIT


@pytest.mark.parametrize("answer", ["controlled_rewrite", "advisor_again", "bypass"])
def test_an_l3_choice_without_a_root_cause_is_refused(answer):
    decision = decide(at_l3(), HumanAnswered(answer, root_cause_problem="the root cause is missing",
                                             new_information="x"))
    assert isinstance(decision.action, L.Refuse) and decision.state.mode == Mode.HIGH_ROT


def test_abandon_needs_no_root_cause():
    decision = decide(at_l3(), HumanAnswered("abandon", root_cause_problem="the root cause is missing"))
    assert decision.action == L.Cancel(abandoned=True)


def test_no_turn_runs_while_the_exit_is_open():
    assert isinstance(decide(at_l3(), Failed("fp-z")).action, L.Refuse)


@pytest.mark.parametrize("waiting, answer", [
    (None, "retry"), (Question.EXIT, "apply"), (Question.EXIT, "rewrite"), (Question.SECOND_REWRITE, "bypass"),
    (Question.APPLY_PATCH, "retry"), (Question.ENVIRONMENT, "abandon"),
])
def test_an_answer_that_does_not_fit_the_question_is_refused(waiting, answer):
    state = LadderState(waiting_on=waiting, counted_failures=1)
    decision = decide(state, HumanAnswered(answer))
    assert isinstance(decision.action, L.Refuse) and decision.state == state


# ----------------------------------------------------------------------------- cancel


@pytest.mark.parametrize("prefix", [
    [], [Failed("a")], [Failed("a"), Failed("a")], [Failed("a"), Failed("b")], [Failed("a"), Failed("b"), Failed("c")],
    [Failed("a"), Failed("b"), Failed("c"), Failed("c")], [EnvironmentFailed("not_found", "e")],
])
def test_a_human_can_always_cancel(prefix):
    decision = last(*prefix, HumanCancelled(at=9))
    assert decision.action == L.Cancel()
    assert decision.state.mode == Mode.CLOSED and decision.state.waiting_on is None
    assert decision.state.history[-1].why == "cancelled by a human"
    assert isinstance(decide(decision.state, Failed("a")).action, L.Refuse)  # closed: nothing moves it again


def test_decide_never_changes_the_state_it_was_given():
    state = LadderState()
    decide(state, Failed("fp"))
    assert state == LadderState()


def test_state_round_trips_through_json():
    state = last(Failed("fp-a"), Failed("fp-b"), Failed("fp-c"), Failed("fp-c")).state
    assert LadderState.model_validate_json(state.model_dump_json()) == state


def test_no_level_is_skipped():
    """Every recorded move goes up by at most one level, except L1 exhausted (L1 -> L3) and drift from L0 (L0 -> L2)."""
    allowed = {(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (3, 3)}
    runs = [
        [Failed("a"), Failed("a"), REWRITE, Failed("a"), HumanAnswered("rewrite"), REWRITE, Failed("a")],
        [Failed("a"), Failed("b"), Failed("c"), Failed("d"), HumanAnswered("advisor_again", new_information="n"),
         Failed("e")],
        [Failed("a"), Failed("a"), REWRITE, Failed("b"), Failed("b"), Failed("b")],
    ]
    for events in runs:
        for step in last(*events).state.history:
            assert (step.from_level.rank, step.to_level.rank) in allowed


# ----------------------------------------------------------------------------- briefs


def entry(brief="Add GET /health.", acceptance=(("A1", "answers 200"),), writes=("src/**",)):
    return PlanEntry(brief, tuple(acceptance), tuple(writes))


@pytest.mark.parametrize("new, kind, added", [
    (entry(), "unchanged", ()),
    (entry(brief="Add  GET /health.\n"), "unchanged", ()),                     # whitespace only
    (entry(acceptance=(("A1", "answers 200"), ("A2", "503 when down"))), "fill", ("A2",)),
    (entry(brief="Add GET /healthz."), "rewrite", ()),
    (entry(writes=("src/**", "tests/**")), "rewrite", ()),
    (entry(acceptance=(("A1", "answers 204"),)), "rewrite", ()),
    (entry(acceptance=(("A2", "answers 200"),)), "rewrite", ("A2",)),            # A1 removed
    (entry(brief="Other.", acceptance=(("A1", "answers 200"), ("A2", "x"))), "rewrite", ("A2",)),
    (entry(writes=("src/**",), acceptance=(("A2", "x"), ("A1", "answers 200"))), "fill", ("A2",)),
])
def test_rewrite_or_fill_is_decided_from_the_diff(new, kind, added):
    change = classify_brief_change(entry(), new)
    assert (change.kind, change.added) == (kind, added)


def test_writes_in_another_order_are_the_same_writes():
    old = entry(writes=("a/**", "b/**"))
    assert classify_brief_change(old, entry(writes=("b/**", "a/**"))).kind == "unchanged"


@pytest.mark.parametrize("line, evidence, ok", [
    ("The handler returns 500 because check smoke fails on test_health.", (), True),
    ("The handler never reads the config file app.toml at start-up.", (), True),
    ("The check failed because the handler was wrong.", (), False),
    ("The run exits with exit status 3 when the flag is absent.", (), True),
    ("The brief omitted the timeout so verdict item B2 keeps failing.", (), True),
    ("KeyError raised when the header is absent from the request.", (), True),
    ("The worker misunderstood what the task wanted it to do.", (), False),
    ("The worker misunderstood what the task wanted it to do.", ("check smoke: tests/test_api.py::test_x",), True),
    ("", (), False),
    ("Broken.", (), False),
    ("Check smoke fails on test_health. Also the lint is red in app.py.", (), False),
    ("Check smoke fails on test_health\nsecond line", (), False),
])
def test_root_cause_needs_one_sentence_with_evidence(line, evidence, ok):
    assert (root_cause_problem(line, evidence) is None) is ok


@pytest.mark.parametrize("line, evidence, ok", [
    ("The smoke check fails because the handler returns 500.", (), True),
    ("The check failed because the handler is wrong somehow.", (), False),     # names none of the ids
    ("The handler is wrong: `AssertionError: 500 != 200` in the log.", (), True),
    ("The handler is wrong when the database is down.", ("B2",), True),
    ("The handler breaks on app.py when the database is down.", (), False),  # a file, but not the failure's
])
def test_root_cause_cites_the_failures_own_evidence_when_known(line, evidence, ok):
    assert (root_cause_problem(line, evidence, known=("smoke", "B2", "A1")) is None) is ok


def test_prompt_heads():
    assert rewrite_prompt_head("api", "0123abcd").startswith("[agentbox:rewrite task=api")
    assert rework_prompt_head("api", Mode.COMPROMISE) == "[agentbox:rework task=api mode=compromise]"
    assert rework_prompt_head("api", Mode.ADVISOR).startswith("[agentbox:rework task=api mode=advisor")
    assert rework_prompt_head("api", Mode.NORMAL) == ""


def test_every_move_is_handed_back_for_the_decision_log():
    decisions = walk(Failed("fp-a", at=1), CoverageGap(("A2",)), Failed("fp-b", at=2))
    assert decisions[0].transition is not None and decisions[0].transition.to_level == Level.L0
    assert decisions[1].transition is None  # filtered: nothing moved
    step = decisions[2].transition
    assert step is not None and (step.from_level, step.to_level, step.to_mode, step.at) == (
        Level.L0, Level.L2, Mode.COMPROMISE, 2.0)


@pytest.mark.parametrize("events, label", [
    ([], "-"),
    ([Failed("a")], "L0"),
    ([Failed("a"), Failed("a"), REWRITE], "L1 (rewrites 1)"),
    ([Failed("a"), Failed("b")], "L2 compromise"),
    ([Failed("a"), Failed("b"), Failed("c")], "L2 advisor"),
    ([Failed("a"), Failed("b"), Failed("c"), Failed("d")], "L3 waiting for an exit"),
    ([Failed("a"), HumanCancelled()], "L0 closed"),
])
def test_the_label_the_faces_show(events, label):
    state = last(*events).state if events else LadderState()
    assert state.label == label


def test_a_rewrite_nobody_asked_for_is_refused():
    decisions = walk(Failed("fp-a"), CoverageGap(("A2",)), REWRITE)
    assert isinstance(decisions[2].action, L.Refuse) and "no rewrite was asked for" in decisions[2].action.reason
    assert decisions[2].state.rewrites_total == 0
    assert walk(Failed("fp-a"), CoverageGap(("A2",)), FILL)[2].action == L.UseBrief(counted=False)


def test_every_checkpoint_says_what_each_answer_does():
    asks = [last(EnvironmentFailed("not_found", "e")).action,
            last(*[EnvironmentFailed("timeout", "e")] * 4).action,
            last(Failed("a"), Failed("a"), REWRITE, Failed("a")).action,
            advisor_delivered(last(Failed("a"), Failed("b"), Failed("c")).state).action,
            decide(at_l3(), HumanCancelled()).action]
    for ask in asks[:4]:
        assert isinstance(ask, L.Ask) and ask.options[-1] == L.CANCEL
        assert all(answer and len(what.split()) >= 2 for answer, what in ask.options)
    high_rot = last(Failed("a"), Failed("b"), Failed("c"), Failed("c")).action
    assert [answer for answer, _ in high_rot.options] == [e.value for e in L.L3_EXITS]
    assert "L3" in high_rot.text and "root cause" in high_rot.text


@pytest.mark.parametrize("brief, required, gap", [
    (["A1", "A2"], ["A1"], ()),
    (["A1"], ["A1", "A3", "A2", "A3"], ("A3", "A2")),
    ([], ["A1"], ("A1",)),
    (["A1"], ["", " A1 "], ()),
])
def test_a_coverage_gap_is_what_the_brief_has_no_entry_for(brief, required, gap):
    assert coverage_gap(brief, required) == gap
