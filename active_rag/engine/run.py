"""The state of one question's run: :class:`Run`, which every step of the engine receives.

A run lives on the stack of one call of :meth:`ActiveRAG.stream <active_rag.engine.loop.ActiveRAG.stream>`, never
on the engine, so one engine answers many questions at once (threads, :mod:`active_rag.decoding.many_questions`).
The loop, the retrieval steps (:mod:`active_rag.engine.retrieving`), the generation helpers
(:mod:`active_rag.engine.generation`) and the answer steps (:mod:`active_rag.engine.answer_steps`) read and write
these fields and nothing else of a question's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..decoding.model import ActiveLM, DecodingSession, PromptUsage
from ..answer.options import OptionsConstraint
from ..components.answer_stage import ResolvedAnswerStage
from ..components.context import ContextPolicy
from ..answer.dates import DateComparison
from ..answer.versions import VersionAnswer
from ..components.prompt_layout import Layout
from ..components.prompts import PromptTemplate
from ..components.queries import QueryFormulator
from ..components.triggers import Trigger
from ..components.settings import RunSettings
from ..types import Passage, Retrieval, Retriever, RouteDecision, TokenStep, TriggerDecision

__all__ = ["EngineView", "Run"]


class EngineView(Protocol):
    """What the engine's collaborators read of it (:class:`~active_rag.engine.loop.ActiveRAG` is one): its model
    and retriever, its components and its numbers, as they are when a call starts."""

    model: ActiveLM
    retriever: Retriever | None
    prompt: PromptTemplate
    prompt_mode: str
    query: QueryFormulator
    context: ContextPolicy
    top_k: int
    max_new_tokens: int
    settings: RunSettings
    forced_answer_tokens: int

    @property
    def stage(self) -> ResolvedAnswerStage: ...

    @property
    def answer_phrase(self) -> str | None: ...


@dataclass
class Run:
    """One question's state, from the router's verdict to the finished answer (see the module docstring)."""

    question: str
    trigger: Trigger
    """The trigger of this run: the engine's, or :class:`~active_rag.components.triggers.NeverTrigger` when the router
    said not to retrieve."""

    # what the answer is so far, and what led to it
    output: list[TokenStep] = field(default_factory=list)
    docs: list[Passage] = field(default_factory=list)
    """The passages the prompt holds (the context policy's choice, fitted to the context window)."""
    retrievals: list[Retrieval] = field(default_factory=list)
    decisions: list[TriggerDecision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    route: RouteDecision | None = None
    generated: int = 0
    """Tokens generated, kept or not (look-aheads, cut sentences, answers written again): the run's cost."""
    usage: PromptUsage = field(default_factory=PromptUsage)
    """Prompt tokens read from the prefix cache and prefilled."""

    # the open generation
    session: DecodingSession | None = None
    layout: Layout | None = None
    session_docs: bool = False
    """The open session's prompt holds retrieved passages."""
    session_passages: list[str] = field(default_factory=list)
    """The ids of the passages in the open session's prompt."""
    answer_passages: list[str] = field(default_factory=list)
    """The ids of the passages in the prompt of the last generated segment."""
    streamed: int = 0
    """Leading tokens of the generation not yet accepted that were streamed live (unchecked)."""
    options: OptionsConstraint | Literal[False] | None = None
    """The answer-options constraint: built on first use; ``False``: the question offers none."""

    # where the loop stands
    done: bool = False
    skip_check: bool = False
    after_retrieval: bool = False
    """The next segment is the first sentence after a truncating retrieval."""
    attempt: int = 0
    """Answers written from the first word before this one (``reanswer``, an answer check)."""
    followed: list[str] = field(default_factory=list)
    """Bridge entities the answer went on from (the ``follow`` action)."""

    # what the answer steps found (ActiveRAGResult's fields of the same names)
    draft: str | None = None
    answer_check: dict[str, Any] | None = None
    settled: DateComparison | VersionAnswer | None = None
    each_name: dict[str, Any] | None = None

    @property
    def output_ids(self) -> list[int]:
        return [s.id for s in self.output]

    @property
    def output_text(self) -> str:
        return "".join(s.text for s in self.output)

    def retrieved(self, ids: Sequence[str]) -> list[Passage]:
        """The passages ``ids`` that this run retrieved, in that order."""
        found = {p.id: p for r in self.retrievals for p in r.passages}
        return [found[i] for i in ids if i in found]
