"""Plain data types shared by the engine, its adapters and the evaluation harness."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import torch


#: Metadata keys naming the file a passage was read from, first found first (:attr:`Passage.shown_title`).
_FILE_KEYS = ("file_name", "source", "file_path", "path")


@dataclass(frozen=True)
class Passage:
    """One retrievable passage: an id, an optional title, the text and the retriever's score."""

    id: str
    text: str
    title: str = ""
    score: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def shown_title(self) -> str:
        """What a trace calls this passage: its title, else the name of the file it was read from (the last part of
        ``metadata["file_name"]``, ``["source"]``, ``["file_path"]`` or ``["path"]``, as LangChain loaders and
        LlamaIndex readers write them), else ``""`` (its id names it then). Shown only: the methods read ``title``."""
        if self.title:
            return self.title
        for key in _FILE_KEYS:
            value = self.metadata.get(key)
            if isinstance(value, str) and value.strip():
                return re.split(r"[/\\]", value.strip().rstrip("/\\"))[-1] or value.strip()
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text, "score": self.score, "metadata": dict(self.metadata)}


@runtime_checkable
class Retriever(Protocol):
    """Anything with ``retrieve(query, k) -> list[Passage]`` (best first) is a retriever."""

    def retrieve(self, query: str, k: int) -> list[Passage]: ...


@dataclass
class TokenStep:
    """One generated token and the signals read from the generation pass that produced it.

    ``attention`` is the head-averaged attention row of this token (as the query, in the captured layer,
    by default the last) over every earlier position of the model input, shape ``[position]``; it is
    ``None`` when attention capture is off or once the engine has released it.
    """

    id: int
    text: str
    logprob: float
    entropy: float
    position: int
    attention: torch.Tensor | None = None

    @property
    def prob(self) -> float:
        return math.exp(self.logprob)


@dataclass
class TriggerDecision:
    """What a trigger decided about one generated segment ("when to retrieve").

    ``index`` is the index, within the segment, of the token that fired (``None`` when the trigger
    did not fire or fires on the segment as a whole); ``score``/``threshold`` are the signal values
    compared (e.g. RIND score vs. theta, or a token probability vs. FLARE's theta).
    """

    fire: bool
    trigger: str
    index: int | None = None
    token: str | None = None
    score: float | None = None
    threshold: float | None = None
    reason: str = ""
    query_hint: str | None = None  # a query the trigger itself found (e.g. FLARE-instruct's [Search(q)])
    token_scores: list[float] | None = None  # the per-token signal over the segment, when the trigger has one
    # every per-token signal the trigger computed over the segment, by name (RIND: prob, entropy, max_attention,
    # semantic, rind; FLARE: prob, entropy); for plots such as active_rag.viz.plot_token_signals
    token_signals: dict[str, list[float]] | None = None
    output_start: int | None = None  # set by the loop: index in the accepted output of the segment's first token
    passage_ids: list[str] | None = None  # set by the loop: ids of the passages in the prompt that wrote the segment
    # where ``threshold`` comes from: "default" (the paper's value), "user", "profile:<name>" or
    # "calibrated:<cache file>" (see active_rag.engine.calibration)
    threshold_source: str | None = None
    entities: list[str] | None = None  # the bridge trigger: names the checked sentence adds to the question

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Retrieval:
    """One retrieval: where it happened, which token and score caused it, the query and the passages.

    ``position`` counts the output tokens that precede the retrieval point (0 = before generation).
    ``passages`` are exactly the passages put in the prompt. ``top_k`` is how many were asked of the
    retriever (per query), ``returned`` how many distinct passages it gave back (BM25 returns fewer than
    ``top_k`` when fewer passages share a word with the query), and ``dropped`` the returned passages left
    out of the prompt, lowest-ranked first out, with ``dropped_reason`` (e.g. the context window was full).
    """

    position: int
    query: str
    passages: list[Passage]
    trigger: str
    token: str | None = None
    score: float | None = None
    threshold: float | None = None
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)  # formulator's evidence, e.g. QFS attention weights
    threshold_source: str | None = None  # "default", "user", "profile:<name>" or "calibrated:<cache file>"
    top_k: int | None = None
    returned: int | None = None
    dropped: list[Passage] = field(default_factory=list)
    dropped_reason: str = ""
    held_ids: list[str] | None = None
    """Ids of every passage the prompt holds after this retrieval (the context policy's choice: this retrieval's
    passages under ``replace``, earlier ones too under ``accumulate``)."""
    new_ids: list[str] | None = None
    """Ids of this retrieval's passages that the prompt did not hold just before it (new evidence)."""
    formulator: str | None = None
    """The query formulator that wrote the query (``input`` for a retrieval with the question)."""
    evicted_ids: list[str] = field(default_factory=list)
    """Ids of the passages the prompt held before this retrieval and no longer holds after it (the context policy's
    bound, the context window), in the order they were held."""
    retriever_calls: int | None = None
    """Calls of the retriever this retrieval made: one per query (the linked look: one per name, one for the
    question); ``None`` for a record made outside the engine."""

    @property
    def passage_ids(self) -> list[str]:
        return [p.id for p in self.passages]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "position": self.position,
            "token": self.token,
            "score": self.score,
            "threshold": self.threshold,
            "threshold_source": self.threshold_source,
            "query": self.query,
            "passage_ids": self.passage_ids,
            "trigger": self.trigger,
            "reason": self.reason,
            "titles": [p.shown_title for p in self.passages],  # a file's name where a passage has no title
            "top_k": self.top_k,
            "returned": len(self.passages) + len(self.dropped) if self.returned is None else self.returned,
            "dropped_ids": [p.id for p in self.dropped],
            "dropped_reason": self.dropped_reason,
            "held_ids": list(self.passage_ids if self.held_ids is None else self.held_ids),
            "new_ids": list(self.passage_ids if self.new_ids is None else self.new_ids),
            "formulator": self.formulator,
            "evicted_ids": list(self.evicted_ids),
            "retriever_calls": self.retriever_calls,
        }
        if "articles" in self.details:  # the linked look: which passage is the own article of which name
            out["linked_articles"] = dict(self.details["articles"])
            out["linked_names"] = list(self.details.get("names") or [])  # the names followed, best first
            if "linked_from" in self.details:  # article id -> the held passage that named it (None: the question)
                out["linked_from"] = dict(self.details["linked_from"])
            if "link_scores" in self.details:  # the link filter: each name's probability, the names not read
                out["link_scores"] = dict(self.details["link_scores"])
                out["filtered"] = list(self.details.get("filtered") or [])
        if "choice" in self.details:  # sr-rag-choose: what the question reads, and why
            out["choice"], out["choice_reason"] = self.details["choice"], self.details.get("choice_reason", "")
        return out


@dataclass
class RouteDecision:
    """A router's verdict (TA-ARE or vanilla): retrieve or not, with the raw model output."""

    retrieve: bool
    router: str
    raw_output: str
    prompt: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TokenEvent:
    """A streamed output token, emitted once the engine has accepted it into the answer: a token that no check reads
    (wo-RAG, SR-RAG, the sentence after a retrieval) as soon as it is generated, a checked segment's tokens once the
    check let them through.

    ``passage_ids`` are the ids of the passages in the prompt that wrote the token. ``attempt`` counts the
    answers written from the first word: 0 the first, 1 the answer written again (``reanswer``, an answer
    check); its tokens start again at position 0. When an answer check keeps the draft, the draft's tokens are
    streamed once more, with their own ``attempt`` 0, as the final answer (a replay, not a new generation). A
    token at an earlier ``position`` than the one before it, in the same attempt, replaces the output from there:
    the engine dropped a partial last sentence before forcing its answer phrase (DRAGIN App. B).
    :class:`~active_rag.answer_stream.AnswerStream` turns these events into text pieces that join to the answer.
    """

    text: str
    token_id: int
    logprob: float
    entropy: float
    position: int
    passage_ids: list[str] | None = None
    attempt: int = 0


@dataclass
class ActiveRAGResult:
    """The outcome of one question: the answer, every retrieval with its trace, and the passages used.

    ``answer`` is the full text the model wrote (its reasoning, then "So the answer is X." when the prompt asks for
    it); :attr:`short_answer` is the answer itself, X. Every interface gives both: the CLI (``Answer:`` and
    ``Short answer:``, ``--json``), LangChain (``answer`` and ``short_answer``) and LlamaIndex (the response text
    and ``metadata["short_answer"]``)."""

    question: str
    answer: str
    method: str
    retrievals: list[Retrieval] = field(default_factory=list)
    decisions: list[TriggerDecision] = field(default_factory=list)
    tokens: list[TokenStep] = field(default_factory=list)
    route: RouteDecision | None = None
    warnings: list[str] = field(default_factory=list)
    generated_tokens: int = 0
    cached_prompt_tokens: int = 0
    """Prompt tokens of this call's model prompts that came from the prefix KV cache (not recomputed)."""
    prefilled_prompt_tokens: int = 0
    """Prompt tokens of this call's model prompts that were computed (prefilled)."""
    final_passage_ids: list[str] = field(default_factory=list)
    """Ids of the passages in the prompt that wrote the answer's last segment (evidence at answer time)."""
    draft: str | None = None
    """With ``reanswer``: the first answer, whose retrievals chose the evidence the final answer was written with;
    with ``answer_check``: the first answer, when the check looked again (``answer`` may be it again)."""
    answer_check: dict[str, Any] | None = None
    """With ``answer_check``: the check's record (fired, each answer's span and confidence, which was kept)."""
    answer_options: list[str] | None = None
    """With ``answer_options``: the question's options the answer span was chosen among (``None``: none offered)."""
    date_comparison: dict[str, Any] | None = None
    """With ``settle_dates``, on a choice question that compares two things in time: the direction, the date the
    reasoning gave each option, and the option they choose (``answer``; ``None``: the reader's answer stands)
    (:class:`~active_rag.answer.dates.DateComparison`); with ``settle_versions``, the same for versions (``event``
    ``"version"``) and, on a question that asks for a version, the version the answer names (``event``
    ``"version-asked"``, :class:`~active_rag.answer.versions.VersionAnswer`)."""
    each_name: dict[str, Any] | None = None
    """With ``ask_each_name``, on a "both" question answered "yes": the names, the question asked of each with the
    passages the answer was written from, the reader's answer to it and its verdict (``asked``), and the answer they
    settle (``answer``: "yes" or "no"; ``None``: the reader's answer stands) (:mod:`active_rag.answer.both_names`).
    With ``ask_same``, on a question whether two names share a value (``rule`` ``"same"``): the same, with the
    ``attribute`` asked and, as each ``verdict``, the value the reader named (``None``: none)
    (:mod:`active_rag.answer.same_value`)."""

    @property
    def short_answer(self) -> str:
        """The answer span: what follows the last "the answer is" (also "the final answer is"), to the end of its
        sentence or line, without a leading ":" or quotes and a trailing period
        (:func:`active_rag.answer_span.answer_span`, what an answer check and ``answer_options`` read); the whole
        ``answer`` when it has no such span. With ``settle_dates``, the option the reasoning's dates choose
        (:attr:`date_comparison`), when they choose one; with ``ask_each_name``, the answer each name's own answer
        settles (:attr:`each_name`), when it settles one."""
        from .answer_span import answer_span  # plain text: imports nothing of the package

        if self.date_comparison and self.date_comparison.get("answer"):
            return str(self.date_comparison["answer"])
        if self.each_name and self.each_name.get("answer"):
            return str(self.each_name["answer"])
        span = answer_span(self.answer)
        return self.answer if span is None else self.answer[span[0]:span[1]]

    @property
    def retriever_calls(self) -> int:
        """Calls of the retriever over all of this question's retrievals: its retrieval cost."""
        return sum(r.retriever_calls or 0 for r in self.retrievals)

    @property
    def prompt_tokens_read(self) -> int:
        """Prompt tokens the model read for this question, from the prefix cache and prefilled: its reading cost."""
        return self.cached_prompt_tokens + self.prefilled_prompt_tokens

    @property
    def source_passage_ids(self) -> list[str]:
        """The passages the answer was read from, for a user: :attr:`final_passage_ids`, or, when the answer's last
        segment was written without passages (FLARE's and DRAGIN's look-ahead is generated without documents and kept
        when sure), the passages the last retrieval left in the prompt; none without a retrieval."""
        if self.final_passage_ids or not self.retrievals:
            return list(self.final_passage_ids)
        last = self.retrievals[-1]
        return list(last.passage_ids if last.held_ids is None else last.held_ids)

    @property
    def passages(self) -> list[Passage]:
        """Every passage that was put in the prompt, first retrieval first, without duplicates (passages
        dropped to fit the context window are in each retrieval's ``dropped``, not here)."""
        seen: set[str] = set()
        out: list[Passage] = []
        for r in self.retrievals:
            for p in r.passages:
                if p.id not in seen:
                    seen.add(p.id)
                    out.append(p)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.answer,
            "short_answer": self.short_answer,
            "method": self.method,
            "retrievals": [r.to_dict() for r in self.retrievals],
            "passages": [p.to_dict() for p in self.passages],
            "route": self.route.to_dict() if self.route else None,
            "warnings": list(self.warnings),
            "generated_tokens": self.generated_tokens,
            "retriever_calls": self.retriever_calls,
            "prompt_tokens": {"cached": self.cached_prompt_tokens, "prefilled": self.prefilled_prompt_tokens,
                              "read": self.prompt_tokens_read},
            "final_passage_ids": list(self.final_passage_ids),
            **({"draft": self.draft} if self.draft is not None else {}),
            **({"answer_check": self.answer_check} if self.answer_check is not None else {}),
            **({"answer_options": list(self.answer_options)} if self.answer_options is not None else {}),
            **({"date_comparison": self.date_comparison} if self.date_comparison is not None else {}),
            **({"each_name": self.each_name} if self.each_name is not None else {}),
            # what the prompt held when each checked segment was written (the context policy's trace)
            "segments": [{"output_start": d.output_start, "passage_ids": d.passage_ids, "fired": d.fire} for d in self.decisions],
        }


StreamEvent = TokenEvent | TriggerDecision | Retrieval | RouteDecision | ActiveRAGResult
