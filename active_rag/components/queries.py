"""Query formulators decide *what* to retrieve once a trigger fires. Each returns one or more queries
from a :class:`QueryContext` (the question, the accepted output, the segment and the trigger's decision).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..entities import generated_entities
from ..errors import UnknownNameError
from ..signals import top_attended_positions
from ..text import is_content_word, split_sentences, word_groups, word_of
from ..types import TokenStep, TriggerDecision
from ..validation import check_query

if TYPE_CHECKING:  # pragma: no cover
    from ..decoding.model import ActiveLM


@dataclass
class QueryContext:
    """Everything a query formulator may read. Positions refer to the decoding session's token ids."""

    question: str
    output: list[TokenStep]
    segment: list[TokenStep]
    decision: TriggerDecision
    action: str = "continue"
    lm: ActiveLM | None = None
    session_ids: list[int] | None = None
    question_span: tuple[int, int] | None = None
    output_start: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def before(self) -> list[TokenStep]:
        """Segment tokens that precede the retrieval point (all of them for look-ahead or whole-segment triggers)."""
        if self.action in ("regenerate", "continue") or self.decision.index is None:
            return list(self.segment)
        return list(self.segment[: self.decision.index])

    def through(self) -> list[TokenStep]:
        """Segment tokens up to and including the triggering token."""
        if self.action in ("regenerate", "continue") or self.decision.index is None:
            return list(self.segment)
        return list(self.segment[: self.decision.index + 1])

    def output_text(self) -> str:
        return "".join(s.text for s in self.output)


def _text(steps: list[TokenStep]) -> str:
    return "".join(s.text for s in steps)


def _last_sentence_tokens(prefix: list[TokenStep], steps: list[TokenStep]) -> list[TokenStep]:
    """The tokens of ``steps`` that belong to the last sentence of ``prefix + steps``."""
    text = _text(prefix + steps)
    sentences = split_sentences(text)
    if not sentences:
        return steps
    start = text.rfind(sentences[-1])
    offset = len(_text(prefix))
    out, pos = [], offset
    for s in steps:
        if pos + len(s.text) > start:
            out.append(s)
        pos += len(s.text)
    return out or steps


@dataclass
class QueryFormulator:
    """Base class: ``formulate(ctx) -> list[str]``."""

    name: ClassVar[str] = "query"
    needs_attention: ClassVar[bool] = False
    needs_model: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_query(self)  # InvalidOptionError for beta=nan, top_n=0, ...

    def formulate(self, ctx: QueryContext) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{self.name}({fields})"


@dataclass
class InputQuery(QueryFormulator):
    """The user input ``x`` (single-round RAG; FLARE's first query ``q_1 = x``)."""

    name: ClassVar[str] = "input"

    def formulate(self, ctx: QueryContext) -> list[str]:
        return [ctx.question]


@dataclass
class LastTokensQuery(QueryFormulator):
    """Previous window (FLARE §4, FL-RAG): the last ``n`` generated tokens before the retrieval point
    (``n = 16`` as the window; DRAGIN's Table 6 ablation uses 25)."""

    name: ClassVar[str] = "last-tokens"
    n: int = 16

    def formulate(self, ctx: QueryContext) -> list[str]:
        return [_text((ctx.output + ctx.before())[-self.n :]).strip()]


@dataclass
class LastSentenceQuery(QueryFormulator):
    """Previous sentence (IRCoT / FS-RAG): the last complete generated sentence before the retrieval point."""

    name: ClassVar[str] = "last-sentence"

    def formulate(self, ctx: QueryContext) -> list[str]:
        text = _text(ctx.output + ctx.before())
        sentences = split_sentences(text)
        if not sentences:
            return []
        complete = text.rstrip().endswith((".", "!", "?")) or ctx.action != "truncate"
        if not complete and len(sentences) >= 2:
            return [sentences[-2].strip()]
        return [sentences[-1].strip()]


@dataclass
class MaskedSentenceQuery(QueryFormulator):
    """FLARE's implicit query (§3.2.2, "masked sentences"): the look-ahead sentence with every word that
    holds a token of probability below ``beta`` removed (``beta = 0.4``, FLARE's Table 4 setting)."""

    name: ClassVar[str] = "masked-sentence"
    beta: float = 0.4

    def formulate(self, ctx: QueryContext) -> list[str]:
        steps = _last_sentence_tokens(ctx.output, ctx.through())
        pieces = [s.text for s in steps]
        kept = []
        for group in word_groups(pieces):
            if all(steps[i].prob >= self.beta for i in group):
                kept.append(word_of(pieces, group))
        ctx.details["masked_words"] = [
            word_of(pieces, g) for g in word_groups(pieces) if any(steps[i].prob < self.beta for i in g)
        ]
        return [" ".join(w for w in kept if w).strip()]


GENERATED_QUESTION_PROMPT = (
    "{context}\n\nGiven the above passage, ask a question to which the answer is the term/entity/phrase \"{span}\"."
)


@dataclass
class GeneratedQuestionsQuery(QueryFormulator):
    """FLARE's explicit queries (§3.2.2, "generated questions"): for every span of the look-ahead
    sentence with probability below ``beta``, ask the model for a question whose answer is that span."""

    name: ClassVar[str] = "generated-questions"
    needs_model: ClassVar[bool] = True
    beta: float = 0.4
    max_questions: int = 3
    max_new_tokens: int = 32

    def spans(self, steps: list[TokenStep]) -> list[str]:
        pieces = [s.text for s in steps]
        spans: list[list[str]] = []
        previous_low = False
        for group in word_groups(pieces):
            low = any(steps[i].prob < self.beta for i in group)
            word = word_of(pieces, group)
            if low and is_content_word(word):
                if previous_low:
                    spans[-1].append(word)
                else:
                    spans.append([word])
            previous_low = low and is_content_word(word)
        return [" ".join(s) for s in spans]

    def formulate(self, ctx: QueryContext) -> list[str]:
        steps = _last_sentence_tokens(ctx.output, ctx.through())
        spans = self.spans(steps)[: self.max_questions]
        ctx.details["spans"] = spans
        if not spans or ctx.lm is None:
            return MaskedSentenceQuery(self.beta).formulate(ctx)
        context = f"{ctx.question}\n{ctx.output_text()}{_text(steps)}".strip()
        questions = []
        for span in spans:
            out = ctx.lm.complete(GENERATED_QUESTION_PROMPT.format(context=context, span=span), max_new_tokens=self.max_new_tokens)
            line = next((ln.strip() for ln in out.splitlines() if ln.strip()), "")
            questions.append(line or span)
        ctx.details["questions"] = questions
        return questions


@dataclass
class AttentionQuery(QueryFormulator):
    """DRAGIN's QFS (Su et al. 2024, §3.2): the ``top_n`` context tokens with the highest attention from
    the triggering token (last layer), put back in their original order and read as words.

    The context is the question and the output generated before the trigger (``scope="question+output"``,
    as in DRAGIN's released code and Appendix C's case study); ``scope="all"`` ranks every prompt position
    (documents, exemplars, template), ``scope="output"`` the generated tokens only (:class:`GeneratedAttentionQuery`).
    Stop words and punctuation are dropped from the query words.
    ``top_n = 35`` follows Table 9 (HotpotQA)."""

    name: ClassVar[str] = "attention"
    needs_attention: ClassVar[bool] = True
    top_n: int = 35
    scope: str = "question+output"
    drop_stopwords: bool = True

    def candidates(self, ctx: QueryContext, trigger_position: int) -> list[int]:
        if self.scope == "all" or ctx.question_span is None or ctx.output_start is None:
            return list(range(trigger_position))
        if self.scope == "output" and trigger_position > ctx.output_start:
            return list(range(ctx.output_start, trigger_position))
        q0, q1 = ctx.question_span
        return list(range(q0, q1)) + list(range(ctx.output_start, trigger_position))

    def formulate(self, ctx: QueryContext) -> list[str]:
        index = ctx.decision.index
        if index is None or index >= len(ctx.segment) or ctx.segment[index].attention is None:
            raise ValueError(
                "AttentionQuery needs the triggering token's attention row: use it with a trigger that names a "
                "token (rind, low-confidence, search-tag, follow-up) and a model whose attention can be captured."
            )
        trigger = ctx.segment[index]
        row = trigger.attention
        assert row is not None and ctx.lm is not None and ctx.session_ids is not None
        cands = self.candidates(ctx, trigger.position)
        chosen = set(top_attended_positions(row, cands, self.top_n))
        ids = ctx.session_ids
        pieces = [ctx.lm.token_text(ids[max(0, p - 6) : p], ids[p]) for p in cands]
        words: list[str] = []
        selected_words: list[str] = []
        # group each contiguous run of candidate positions into words
        runs: list[list[int]] = []
        for k, p in enumerate(cands):
            if runs and p == cands[runs[-1][-1]] + 1:
                runs[-1].append(k)
            else:
                runs.append([k])
        for run in runs:
            run_pieces = [pieces[k] for k in run]
            for group in word_groups(run_pieces):
                ks = [run[g] for g in group]
                if any(cands[k] in chosen for k in ks):
                    word = word_of(pieces, ks)
                    selected_words.append(word)
                    if not self.drop_stopwords or is_content_word(word):
                        words.append(word.strip("\"'`.,;:!?()[]{}"))
        ctx.details.update(
            trigger_token=trigger.text,
            context_tokens=pieces,
            context_positions=cands,
            weights=[float(row[p]) for p in cands],
            selected_positions=sorted(chosen),
            selected_words=selected_words,
        )
        return [" ".join(w for w in words if w)]


@dataclass
class GeneratedAttentionQuery(AttentionQuery):
    """QFS restricted to generated tokens, after the question (beyond the papers): DRAGIN's QFS over the question and the
    output mostly picks the question's own words again, which the first retrieval already searched with; here
    the ``top_n`` most attended tokens are chosen among the generated ones only (the whole question context when
    nothing was generated yet), and the query is the question followed by those words."""

    name: ClassVar[str] = "attention-generated"
    top_n: int = 10
    scope: str = "output"

    def formulate(self, ctx: QueryContext) -> list[str]:
        words = super().formulate(ctx)[0]
        return [f"{ctx.question} {words}".strip()]


@dataclass
class QuestionEntityQuery(QueryFormulator):
    """The question plus the entities the model just generated (beyond the papers): in a multi-hop answer the next hop is
    usually named in the latest generated sentence (a bridge entity such as "Peter Schmeichel"), and the question's
    own words keep the query on topic. Entities: capitalised phrases and numbers that the question does not name,
    from the latest sentence before the retrieval point that has any (:func:`generated_entities`)."""

    name: ClassVar[str] = "question-entity"
    max_entities: int = 4

    def formulate(self, ctx: QueryContext) -> list[str]:
        entities = generated_entities(_text(ctx.output + ctx.before()), ctx.question, self.max_entities)
        ctx.details["entities"] = entities
        return [f"{ctx.question} {' '.join(entities)}".strip()]


@dataclass
class NextHopQuery(QueryFormulator):
    """Two queries whose rankings the engine merges round-robin (beyond the papers): the generated entities alone, which
    find the bridge entity's own passage (a question's many words outweigh one name in BM25), then the question,
    whose next-ranked passages the prompt does not hold yet (with ``accumulate``/``rerank`` a retrieval skips
    held passages). When the model names no new entity only the question is asked. The question query hedges a
    wrong or missing entity: the traces of ``question-entity`` show a third of its retrievals finding new gold
    evidence, fewer than the question's next-ranked passages do."""

    name: ClassVar[str] = "next-hop"
    max_entities: int = 4

    def formulate(self, ctx: QueryContext) -> list[str]:
        entities = generated_entities(_text(ctx.output + ctx.before()), ctx.question, self.max_entities)
        ctx.details["entities"] = entities
        return [" ".join(entities), ctx.question] if entities else [ctx.question]


@dataclass
class EntityQuery(QueryFormulator):
    """The bridge entities alone, one query each (beyond the papers): those the ``bridge`` trigger found in the sentence
    it checked, else those of the latest generated sentence that names any (:func:`generated_entities`). One
    name is what finds its own article in BM25; the question's words would outweigh it. Falls back to the
    question when the model named nothing new."""

    name: ClassVar[str] = "entity"
    max_entities: int = 4

    def formulate(self, ctx: QueryContext) -> list[str]:
        entities = list(ctx.decision.entities or [])[: self.max_entities]
        if not entities:
            entities = generated_entities(_text(ctx.output + ctx.through()), ctx.question, self.max_entities)
        ctx.details["entities"] = entities
        return entities or [ctx.question]


@dataclass
class FullContextQuery(QueryFormulator):
    """The question plus everything generated before the retrieval point (DRAGIN Table 6, "Full Context")."""

    name: ClassVar[str] = "full-context"

    def formulate(self, ctx: QueryContext) -> list[str]:
        return [f"{ctx.question} {_text(ctx.output + ctx.before())}".strip()]


@dataclass
class SearchTagQuery(QueryFormulator):
    """FLARE-instruct: the query the model wrote inside ``[Search(query)]``."""

    name: ClassVar[str] = "search-tag"

    def formulate(self, ctx: QueryContext) -> list[str]:
        return [ctx.decision.query_hint] if ctx.decision.query_hint else []


@dataclass
class FollowUpQuery(QueryFormulator):
    """Self-ask: the generated ``Follow up:`` question."""

    name: ClassVar[str] = "follow-up"

    def formulate(self, ctx: QueryContext) -> list[str]:
        return [ctx.decision.query_hint] if ctx.decision.query_hint else []


QUERIES: dict[str, type[QueryFormulator]] = {
    cls.name: cls
    for cls in (
        InputQuery,
        LastTokensQuery,
        LastSentenceQuery,
        MaskedSentenceQuery,
        GeneratedQuestionsQuery,
        AttentionQuery,
        GeneratedAttentionQuery,
        QuestionEntityQuery,
        NextHopQuery,
        EntityQuery,
        FullContextQuery,
        SearchTagQuery,
        FollowUpQuery,
    )
}
QUERY_ALIASES = {"qfs": "attention", "dragin": "attention", "flare": "masked-sentence", "masked": "masked-sentence",
                 "questions": "generated-questions", "fl-rag": "last-tokens", "fs-rag": "last-sentence"}


def make_query(spec: str | QueryFormulator, **kwargs: Any) -> QueryFormulator:
    """A query formulator from its name (``attention``, ``masked-sentence``, ...) or an instance."""
    if isinstance(spec, QueryFormulator):
        return spec
    key = QUERY_ALIASES.get(spec, spec)
    if key not in QUERIES:
        raise UnknownNameError("query formulator", spec, list(QUERIES) + list(QUERY_ALIASES))
    return QUERIES[key](**kwargs)
