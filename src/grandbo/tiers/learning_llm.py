"""What learning from edits asks an LLM, when one is configured: how a person edited a draft (the category and a
one-line summary of an edit signal), and the one-sentence rule a group of signals shows. Either answer that fails,
or is nonsense, leaves the rules' own (`tiers.learning`)."""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from grandbo.errors import GrandboError
from grandbo.llm import LLMClient, json_object
from grandbo.tiers.edit_rules import Category
from grandbo.tiers.learning_model import Signal

log = structlog.get_logger("grandbo.tiers.learning")


def classified_by_llm(
    llm: LLMClient, org: str, draft: str, edited: str, fallback: tuple[Category, str, str]
) -> tuple[Category, str, str]:
    """The LLM's category and summary of an edit, and its name; `fallback` (the rules' and theirs) when it fails."""
    system = (
        "You classify how a person edited a draft. Answer with JSON only: "
        '{"category": one of "tone", "style", "vocabulary", "length", "structure", "summary": one line}.'
    )
    try:
        answer = json_object(llm.complete(system, f"DRAFT:\n{draft}\n\nEDITED:\n{edited}"))
        chosen = Category(answer["category"] if answer["category"] != Category.UNCLASSIFIED else "(none)")
        return chosen, str(answer["summary"]).strip()[:300], llm.name
    except (GrandboError, ValueError, KeyError, TypeError) as error:
        log.warning("learning.llm_classification_failed", org_id=org, error=str(error)[:200])
        return fallback


def worded_by_llm(llm: LLMClient, org: str, category: Category, signals: Sequence[Signal], fallback: str) -> str:
    """The rule the signals show in one sentence, as the LLM words it; `fallback` when it fails or rambles."""
    system = "Write one imperative sentence, under 30 words, stating the writing rule these edits show."
    prompt = f"Category: {category.value}\n" + "\n".join(f"- {s.summary}" for s in signals)
    try:
        text = llm.complete(system, prompt).strip()
        return text if 0 < len(text) <= 300 else fallback
    except GrandboError as error:
        log.warning("learning.llm_wording_failed", org_id=org, error=str(error)[:200])
        return fallback
