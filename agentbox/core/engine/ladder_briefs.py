"""The lead's new plan entry for a failing task: a rewrite or a coverage fill, and its root-cause line.

Both are decided by the code layer from what was written, never from what the lead or the
human says it is: a fill only adds acceptance items (not counted against the task's rewrites),
anything else is a rewrite, which must carry a one-sentence root cause with evidence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

REWRITE_PROMPT_HEAD = "[agentbox:rewrite task={task}"
"""How the lead's rewrite turn prompt starts (then ` fingerprint=…]`)."""
COMPROMISE_PROMPT_HEAD = "[agentbox:rework task={task} mode=compromise"
"""How a compromise-mode rework prompt starts."""
ADVISOR_PROMPT_HEAD = "[agentbox:rework task={task} mode=advisor"
"""How an advisor-mode turn prompt starts (the worker is read-only and writes a guide and a patch)."""
DEBT_TAG = "FIXME: Tech Debt"
"""The tag every change of a compromise patch carries in the code."""
PATCH_FILE = "patch.diff"
GUIDE_FILE = "guide.md"
"""What an advisor round hands in, in the task's hand-on folder."""


@dataclass(frozen=True)
class PlanEntry:
    """The parts of a task's plan entry a rewrite may change."""

    brief: str
    acceptance: tuple[tuple[str, str], ...]
    """(id, criterion) pairs, in order."""
    writes: tuple[str, ...] = ()


@dataclass(frozen=True)
class BriefChange:
    """How a new plan entry differs from the old: `fill` only adds acceptance items."""

    kind: Literal["unchanged", "fill", "rewrite"]
    added: tuple[str, ...] = ()
    """Acceptance ids the new entry adds."""
    why: str = ""


def classify_brief_change(old: PlanEntry, new: PlanEntry) -> BriefChange:
    """Rewrite or coverage fill, from the diff of the two entries (never from what anyone says it is).

    A fill keeps the brief, the writes and every old acceptance item word for word, and adds at
    least one; any other change is a rewrite.
    """
    old_items, new_items = dict(old.acceptance), dict(new.acceptance)
    added = tuple(i for i, _ in new.acceptance if i not in old_items)
    if old == new:
        return BriefChange("unchanged")
    if _words(old.brief) != _words(new.brief):
        return BriefChange("rewrite", added, "the brief changed")
    if sorted(old.writes) != sorted(new.writes):
        return BriefChange("rewrite", added, "the writes changed")
    for item, criterion in old_items.items():
        if item not in new_items:
            return BriefChange("rewrite", added, f"acceptance {item} was removed")
        if _words(new_items[item]) != _words(criterion):
            return BriefChange("rewrite", added, f"acceptance {item} changed")
    if not added:
        return BriefChange("unchanged")
    return BriefChange("fill", added, "only acceptance items were added: " + ", ".join(added))


def coverage_gap(brief_acceptance_ids: Sequence[str], required_ids: Sequence[str]) -> tuple[str, ...]:
    """The acceptance ids required of the task (by the plan, or cited by a failing verdict) that its
    brief has no entry for, in the order they were required: a coverage gap, back to the lead, not
    counted against the worker. Empty when the brief covers them all."""
    have = {i.strip() for i in brief_acceptance_ids}
    missing: list[str] = []
    for item in required_ids:
        name = item.strip()
        if name and name not in have and name not in missing:
            missing.append(name)
    return tuple(missing)


def _words(text: str) -> str:
    return " ".join(text.split())


_EVIDENCE = re.compile(
    r"`[^`]+`"                                   # a quoted log line or command
    r"|\b[A-Z]{1,3}\d+\b"                        # a verdict item or acceptance id: B2, A1
    r"|\btest_\w+|\w+::\w+"                       # a test id
    r"|\b[\w-]+(?:/[\w.-]+)*\.[A-Za-z]\w{0,5}\b"  # a file: app.py, src/db/schema.sql
    r"|\b\w+(?:Error|Exception)\b"                # an error type
    r"|\bexit (?:status|code) \d+")


def root_cause_problem(root_cause: str | None, evidence: Sequence[str] = (), known: Sequence[str] = ()) -> str | None:
    """What is wrong with a root-cause line (None when it is sound): one sentence, with evidence.

    `known` are the ids the failure carries (failing check names, verdict item and acceptance
    ids, test ids): when given, the sentence or its `evidence` must name one of them or quote a
    log line in backticks. Without them, evidence is anything shaped like an item id, a test id,
    a file, an error type, an exit status or a quoted log line, or a non-empty `evidence` entry.
    """
    text = (root_cause or "").strip()
    if not text:
        return "the root cause is missing"
    if "\n" in text or len(re.findall(r"[.!?](?:\s|$)", text)) > 1:
        return "the root cause is one sentence"
    if len(text.split()) < 4:
        return "the root cause says too little (one sentence: what breaks and why)"
    cited = [text, *(e for e in evidence if e.strip())]
    ids = [k for k in known if k.strip()]
    if ids:
        if not any(k in part for k in ids for part in cited) and not any("`" in part for part in cited):
            return f"the root cause cites none of the failure's evidence ({', '.join(ids[:10])}) and quotes no log line"
    elif len(cited) == 1 and not _EVIDENCE.search(text):
        return ("the root cause names no evidence (a failing check or verdict item id, a test, a file, "
                "an error type or a log line)")
    return None


def rewrite_prompt_head(task_id: str, fingerprint: str) -> str:
    """The first line of the lead's rewrite turn prompt."""
    return REWRITE_PROMPT_HEAD.format(task=task_id) + f" fingerprint={fingerprint}]"


def rework_prompt_head(task_id: str, mode: str) -> str:
    """The first line of a compromise or advisor rework prompt ("" in normal mode)."""
    if mode == "compromise":
        return COMPROMISE_PROMPT_HEAD.format(task=task_id) + "]"
    if mode == "advisor":
        return ADVISOR_PROMPT_HEAD.format(task=task_id) + "]"
    return ""


def compromise_section(task_id: str, artifacts_dir: str) -> str:
    """What a compromise-mode rework is allowed and must do."""
    return (f"Compromise mode (failure ladder L2: the failures drifted): a patch that makes the checks pass is "
            f"allowed this time. Tag every such change in the code with a comment `{DEBT_TAG}: <what is owed>`; "
            "agentbox refuses a submission whose diff adds no such tag and records each tagged line as tech "
            "debt in .agent-box/debt.yaml.")


def advisor_section(task_id: str, artifacts_dir: str) -> str:
    """What an advisor-mode turn is: read-only, a guide and a patch."""
    where = f"{artifacts_dir}/{task_id}/"
    return (f"Advisor mode (failure ladder): your write access to the project is taken away for this task (the "
            f"sandbox is read-only). Write a guide ({where}{GUIDE_FILE}: what is wrong and how to fix it) and a "
            f"patch ({where}{PATCH_FILE}: a unified diff `git apply` takes, paths relative to the project), then "
            "submit. A human decides whether to apply it.")
