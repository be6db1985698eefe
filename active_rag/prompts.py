"""Prompt templates. A template renders the user message for a question, with or without retrieved
passages; the loop wraps it in the model's chat template and appends the answer generated so far."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .types import Passage

_MARK = "\uE001QUESTION\uE001"


@dataclass(frozen=True)
class PromptTemplate:
    """``direct`` and ``with_docs`` are ``str.format`` templates with ``{question}``; ``with_docs`` also has
    ``{documents}``, each passage formatted with ``doc_format`` (``{i}``, ``{title}``, ``{text}``)."""

    name: str
    direct: str
    with_docs: str
    doc_format: str = "[{i}] {title} {text}"
    doc_separator: str = "\n"

    def documents(self, passages: Sequence[Passage]) -> str:
        return self.doc_separator.join(
            self.doc_format.format(i=i, title=p.title, text=p.text).replace("  ", " ") for i, p in enumerate(passages, 1)
        )

    def render(self, question: str, passages: Sequence[Passage] = ()) -> str:
        before, q, after = self.render_parts(question, passages)
        return before + q + after

    def render_parts(self, question: str, passages: Sequence[Passage] = ()) -> tuple[str, str, str]:
        """``(text before the question, question, text after)`` so the engine knows where the question sits."""
        template = self.with_docs if passages else self.direct
        text = template.format(question=_MARK, documents=self.documents(passages))
        before, _, after = text.partition(_MARK)
        return before, question, after.replace(_MARK, question)


DRAGIN_PROMPT = PromptTemplate(
    name="dragin",
    direct="Answer the following question by reasoning step-by-step. End with \"So the answer is\" and the answer.\n"
    "Question: {question}",
    # DRAGIN §3.3: "Below are the external knowledge references: [1] Di1 ... Please answer the question
    # based on the external knowledge: Question: xxx Answer: T'"
    with_docs="Below are the external knowledge references:\n{documents}\n"
    "Please answer the question based on the external knowledge:\nQuestion: {question}",
)

FLARE_PROMPT = PromptTemplate(
    name="flare",
    direct="Answer the following question by reasoning step-by-step. End with \"So the answer is\" and the answer.\n"
    "Question: {question}",
    # FLARE App. A: documents are linearised by rank and prepended to the user input.
    with_docs="Search results:\n{documents}\n\n"
    "Answer the following question by reasoning step-by-step, using the search results. "
    "End with \"So the answer is\" and the answer.\nQuestion: {question}",
)

_FLARE_INSTRUCT_SKILLS = (
    "Skill 1. Use the Search API to look up relevant information by writing \"[Search(term)]\" where \"term\" is "
    "the search term you want to look up. For example:\n"
    "Question: But what are the risks during production of nanomaterials?\n"
    "Answer (with Search): [Search(nanomaterial production risks)] Some nanomaterials may give rise to various "
    "kinds of lung damage.\n\n"
    "Question: The colors on the flag of Ghana have the following meanings.\n"
    "Answer (with Search): Red is for [Search(Ghana flag red meaning)] the blood of martyrs, green for forests, "
    "and gold for mineral wealth.\n\n"
    "Skill 2. Answer questions by thinking step-by-step. First, write out the reasoning steps, then draw the "
    "conclusion. For example:\n"
    "Question: When did the director of film Hypocrite (Film) die?\n"
    "Answer (with step-by-step): The film Hypocrite was directed by Miguel Morayta. Miguel Morayta died on "
    "19 June 2013. So the answer is 19 June 2013.\n\n"
    "Now, combine the aforementioned two skills. First, write out the reasoning steps, then draw the conclusion, "
    "where the reasoning steps should also utilize the Search API \"[Search(term)]\" whenever possible.\n"
)

FLARE_INSTRUCT_PROMPT = PromptTemplate(
    name="flare-instruct",
    # FLARE §3.1 / Prompt 3.1-3.3: retrieval instructions + task instructions, combined.
    direct=_FLARE_INSTRUCT_SKILLS + "Question: {question}\nAnswer (with step-by-step & Search):",
    with_docs="Search results:\n{documents}\n\n" + _FLARE_INSTRUCT_SKILLS
    + "Question: {question}\nAnswer (with step-by-step & Search):",
)

_SELF_ASK_EXEMPLARS = (
    "Question: Who lived longer, Muhammad Ali or Alan Turing?\n"
    "Are follow up questions needed here: Yes.\n"
    "Follow up: How old was Muhammad Ali when he died?\n"
    "Intermediate answer: Muhammad Ali was 74 years old when he died.\n"
    "Follow up: How old was Alan Turing when he died?\n"
    "Intermediate answer: Alan Turing was 41 years old when he died.\n"
    "So the final answer is: Muhammad Ali\n\n"
    "Question: When was the founder of craigslist born?\n"
    "Are follow up questions needed here: Yes.\n"
    "Follow up: Who was the founder of craigslist?\n"
    "Intermediate answer: Craigslist was founded by Craig Newmark.\n"
    "Follow up: When was Craig Newmark born?\n"
    "Intermediate answer: Craig Newmark was born on December 6, 1952.\n"
    "So the final answer is: December 6, 1952\n\n"
)

SELF_ASK_PROMPT = PromptTemplate(
    name="self-ask",
    # Press et al. 2022 (FLARE Prompt D.2): exemplars with manually written follow-up questions.
    direct=_SELF_ASK_EXEMPLARS + "Question: {question}\nAre follow up questions needed here:",
    with_docs="Search results:\n{documents}\n\n" + _SELF_ASK_EXEMPLARS
    + "Question: {question}\nAre follow up questions needed here:",
)

PROMPTS: dict[str, PromptTemplate] = {p.name: p for p in (DRAGIN_PROMPT, FLARE_PROMPT, FLARE_INSTRUCT_PROMPT, SELF_ASK_PROMPT)}
