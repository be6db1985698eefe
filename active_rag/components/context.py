"""Context policies: *what the prompt keeps* of the passages retrieved so far, the third component beside the
trigger ("when") and the query formulator ("what").

The papers replace the documents at every retrieval: what an earlier query found is gone when the answer is
written. On small models evidence in the prompt decides the answer (both gold paragraphs in the prompt: EM
47.5 for qwen2.5-coder-0.5b on HotpotQA, 5.0 with none), so the policies here differ in what survives:

- :class:`ReplaceContext` (``replace``, the papers'): the prompt holds the newest retrieval's passages only,
  and only for as long as the method's source keeps them. DRAGIN (RIND, ``documents_for_one_sentence``) uses
  them for the one sentence regenerated after the retrieval and checks the following sentences without
  documents (the released code, oneal2000/DRAGIN ``src/generate.py``, ``AttnWeightRAG.inference``: every
  iteration prompts without documents unless it retrieved); FLARE-direct uses them for the regenerated
  sentence (its look-ahead is always generated without documents, §3); FLARE-instruct, self-ask, FL-RAG,
  FS-RAG and SR-RAG keep them until the next retrieval.
- :class:`KeepNewestContext` (``keep-newest``): the newest retrieval's passages stay in the prompt for the rest
  of the answer (active-rag's behaviour for DRAGIN before the context policies).
- :class:`AccumulateContext` (``accumulate``): a bounded buffer of distinct passages across retrievals,
  deduplicated by id, at most ``max_passages`` (by default twice the engine's ``top_k``: the question's passages
  and as many more, 6 at ``top_k`` 3); in the prompt in retrieval order (the first retrieval's passages first, each
  retrieval's in its rank order, so the newest sit nearest the question); beyond the bound, or when the model's
  context is full, the oldest leave first.
- :class:`ReadLinksContext` (``read-links``): ``accumulate`` whose prompt reads a linked look's articles beside
  the passages that named them, and leaves out the question's next passages when links were found.
- :class:`FocusContext` (``focus``): the question's passages, then at each later retrieval only the question's
  best ``question`` (2) and that retrieval's best ``look`` (1): a second look read in a prompt as short as the
  first, for a small reader that reads three passages better than six; a look that compares what the question
  names is read in full, as ``accumulate`` reads it (``compare``).
- :class:`RerankContext` (``rerank``, after SeaKR, Yao et al. 2024, THU-KEG/SeaKR): the candidates are the
  held passages and the new ones; each is scored by the same model's uncertainty about the next sentence with
  that passage alone in the prompt (the mean entropy, DRAGIN Eq. 1, of the first ``probe_tokens`` greedy
  tokens; prefills start from the prefix cache), and the ``keep`` least uncertain stay, least uncertain first.

With ``accumulate`` and ``rerank`` a retrieval asks for passages the prompt does not already hold
(:attr:`ContextPolicy.skip_held`): the retriever is asked for more and the held ones are skipped, so every
retrieval can add evidence. ``replace`` and ``keep-newest`` take the retriever's ranking as it is.

Every passage that leaves the prompt is in the trace: a new one the policy does not keep in its retrieval's
``dropped``, one the prompt held before in its ``evicted_ids`` (:func:`record_held`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import InvalidOptionError, UnknownNameError
from ..types import Passage, Retrieval
from ..validation import check_int

if TYPE_CHECKING:
    from ..answer.links import Links

Scorer = Callable[[Sequence[Passage]], float]
"""The model's uncertainty about the next sentence with these passages in the prompt (lower: more certain)."""


#: settings a policy's description leaves out while they are 0, so that rows written before they existed keep their keys
_UNSET_UNSAID = ("hub", "link_filter")


@dataclass
class ContextPolicy:
    """Base class: what the prompt holds after a retrieval, and after the sentence that follows it."""

    name: ClassVar[str] = "context"
    skip_held: ClassVar[bool] = False
    """Retrievals skip passages the prompt already holds."""
    needs_scorer: ClassVar[bool] = False
    fill_links: ClassVar[bool] = True
    """A linked look (:func:`active_rag.answer.links.follow_links`) fills what its links leave of ``top_k`` with the
    question's next passages; ``False``: only when no link was found."""

    def after_retrieval(self, held: Sequence[Passage], new: Sequence[Passage], scorer: Scorer | None = None) -> list[Passage]:
        """The prompt's passages after a retrieval returned ``new`` while it held ``held``."""
        raise NotImplementedError  # pragma: no cover - abstract

    def after_sentence(self, held: Sequence[Passage], trigger: Any) -> list[Passage]:
        """The prompt's passages once the sentence generated right after a truncating retrieval is accepted
        (``trigger``: the method's). Default: unchanged."""
        return list(held)

    def arrange_links(self, kept: Sequence[Passage], links: Links) -> list[Passage]:
        """The order the prompt reads ``kept`` in after a linked look that found ``links``. Default: as kept."""
        return list(kept)

    def for_top_k(self, top_k: int) -> ContextPolicy:
        """This policy with its settings that follow the engine's ``top_k`` resolved (a copy when any changes).
        Default: itself."""
        return self

    def for_look(self, way: str) -> ContextPolicy:
        """The policy for a look the question's form sent ``way`` (``"compare"`` or ``"links"``,
        :func:`active_rag.answer.read_choice.choose_reading`). Default: itself."""
        return self

    def describe(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in vars(self).items()
                             if not k.startswith("_") and (k not in _UNSET_UNSAID or v))
        return f"{self.name}({settings})"


@dataclass
class ReplaceContext(ContextPolicy):
    """The papers' policy: the newest retrieval's passages replace the held ones; after a truncating trigger's
    retrieval (DRAGIN) they serve the one regenerated sentence and the prompt is without documents again."""

    name: ClassVar[str] = "replace"

    def after_retrieval(self, held: Sequence[Passage], new: Sequence[Passage], scorer: Scorer | None = None) -> list[Passage]:
        return list(new)

    def after_sentence(self, held: Sequence[Passage], trigger: Any) -> list[Passage]:
        return [] if getattr(trigger, "documents_for_one_sentence", False) else list(held)


@dataclass
class KeepNewestContext(ContextPolicy):
    """The newest retrieval's passages stay in the prompt for the rest of the answer."""

    name: ClassVar[str] = "keep-newest"

    def after_retrieval(self, held: Sequence[Passage], new: Sequence[Passage], scorer: Scorer | None = None) -> list[Passage]:
        return list(new)


def _distinct(passages: Sequence[Passage]) -> list[Passage]:
    seen: set[str] = set()
    out: list[Passage] = []
    for p in passages:
        if p.id not in seen:
            seen.add(p.id)
            out.append(p)
    return out


#: ``accumulate``'s bound outside an engine, where no ``top_k`` sets it: twice the engine's default ``top_k``.
DEFAULT_MAX_PASSAGES = 6


@dataclass
class AccumulateContext(ContextPolicy):
    """Distinct passages of every retrieval so far, oldest first, at most ``max_passages`` (the oldest leave).

    ``max_passages=None`` (the default) is twice the engine's ``top_k`` (:meth:`for_top_k`): the question's own
    passages and as many more, so that ``top_k`` 5 with the linked articles keeps the five passages the links came
    from (a fixed 6 kept the fifth only).

    ``hub`` (per mille; 0, the default, follows every name): a linked look leaves out the names that at least that
    share of the corpus's passages, and at least 20, mention (:func:`~active_rag.answer.links.follow_links`' ``hub``;
    measured, not the default: docs/context.md, "Hubs").

    ``link_filter`` (0, the default, reads every name a look follows; 1): a linked look reads a name's passage only
    when the shipped learned filter scores it likely gold (:mod:`active_rag.answer.link_filter`; the trace lists the
    names left out under ``details["filtered"]`` and every score under ``details["link_scores"]``)."""

    name: ClassVar[str] = "accumulate"
    skip_held: ClassVar[bool] = True
    max_passages: int | None = None
    hub: int = 0
    link_filter: int = 0

    def __post_init__(self) -> None:
        if self.max_passages is not None:
            check_int("max_passages", self.max_passages, minimum=1, hint="It bounds the passages the prompt keeps across retrievals")
        check_int("hub", self.hub, minimum=0, hint="It is the per mille of the corpus's passages that makes a name a hub")
        check_int("link_filter", self.link_filter, minimum=0, maximum=1,
                  hint="1 reads a linked passage only when the learned link filter keeps it")

    def for_top_k(self, top_k: int) -> AccumulateContext:
        return self if self.max_passages is not None else replace(self, max_passages=2 * top_k)

    def after_retrieval(self, held: Sequence[Passage], new: Sequence[Passage], scorer: Scorer | None = None) -> list[Passage]:
        kept = _distinct([*held, *new])
        return kept[-(self.max_passages or DEFAULT_MAX_PASSAGES):]


@dataclass
class ReadLinksContext(AccumulateContext):
    """``accumulate`` whose prompt reads a linked look's passages where they belong (beyond the papers): each
    linked article right after the passage whose name led to it (``beside=1``; ``beside=0``: after every held
    passage, as ``accumulate``), the articles of the question's own names after the question's passages, and the
    question's next passages only when no name's article was found (:attr:`fill_links`). Those fillers are noise
    where links are found: on the union corpus 1.7% (HotpotQA dev), 0.9% (dev-b) and 0.0% (2Wiki) of them are gold
    paragraphs, against 24-52% of the linked articles (``sr-rag-choose`` rows, qwen2.5-coder-1.5b). Measured on
    HotpotQA dev (union, 100 questions) against ``sr-rag-choose``: ``beside=1`` -2.3 [-7.7, +2.8] F1 (an article
    beside its source sits farther from the question), ``beside=0`` +1.4 [-4.0, +6.3] at a third fewer retriever
    calls (docs/context.md, "Read the links where they belong"). Any other retrieval accumulates as ``accumulate``
    does."""

    name: ClassVar[str] = "read-links"
    fill_links: ClassVar[bool] = False
    beside: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("beside", self.beside, minimum=0, maximum=1, hint="1 puts each linked article beside its source")

    def arrange_links(self, kept: Sequence[Passage], links: Links) -> list[Passage]:
        ids = {p.id for p in kept}
        articles = [p for p, name in links.sources if name is not None and p.id in ids]
        article_ids = {p.id for p in articles}
        rest = [p for p in kept if p.id not in article_ids]
        if not self.beside:
            return rest + articles
        out: list[Passage] = []
        for p in rest:
            out.append(p)
            out.extend(a for a in articles if links.linked_from.get(a.id) == p.id)
        placed = {p.id for p in out}
        return out + [a for a in articles if a.id not in placed]


@dataclass
class FocusContext(AccumulateContext):
    """The question's passages; after each later retrieval, the question's best ``question`` passages (the first
    retrieval's, in rank order) and that retrieval's best ``look`` ones (beyond the papers). The rest leave the prompt,
    each named in the trace (``evicted_ids``, ``dropped``).

    Why: a small reader loses to the passages around it what a look adds. qwen2.5-coder-0.5b scores 12.4 F1 lower
    with ``look-again-choose``'s six passages than with the gold paragraphs alone on HotpotQA dev (three passages:
    5.4 lower). Re-answering the 87 questions whose draft was sent on, from the same held passages without the
    model (``results/choose/layout_probe.py``): the question's first two and the look's first (a linked article where
    one was found) score +4.2 F1 [-2.4, +10.8] over the six, and 45.9 F1 on the 49 of them whose prompt holds every
    gold paragraph (the six: 34.5 on 66); the first two and the look's first two +0.4. With the engine
    (``look-again-choose``, the 0.5B model, against ``accumulate``): HotpotQA dev +2.1 F1 over its pool and over the
    union, +4.2 there with every title hidden, 2WikiMultihopQA (union) +1.5, HotpotQA dev-b (union, mostly
    comparisons) +1.7; above six passages on every HotpotQA and 2WikiMultihopQA slice run, 1.7 below on StrategyQA
    (at chance); the 1.5B reader, which loses no more to six passages
    than to three, keeps ``accumulate`` (docs/context.md). The first retrieval is kept as ``accumulate`` keeps it,
    and a retrieval that brings nothing new leaves the prompt as it was.

    ``compare=1`` (the default): a look the question's form sent to compare what it names (:meth:`for_look`) keeps
    every passage, as ``accumulate`` does; its evidence is the compared things' own articles, mostly among the
    question's first three. Re-answering the 81 such looks of HotpotQA dev-b over the union: the six passages 50.6
    F1, the first three and the look's first 47.4, the first two and the look's first 42.2 (-8.4 [-16.4, -0.4]
    against the six). ``compare=0`` focuses those looks like any other."""

    name: ClassVar[str] = "focus"
    question: int = 2
    look: int = 1
    compare: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("question", self.question, minimum=0, hint="It is the number of the question's passages a look keeps")
        check_int("look", self.look, minimum=1, hint="It is the number of a look's passages the prompt reads")
        check_int("compare", self.compare, minimum=0, maximum=1,
                  hint="1 reads a comparison look in full, as accumulate; 0 focuses it like any other look")

    def for_look(self, way: str) -> ContextPolicy:
        if way == "compare" and self.compare:
            return AccumulateContext(max_passages=self.max_passages, hub=self.hub, link_filter=self.link_filter)
        return self

    def describe(self) -> str:
        # focus before comparison looks were read in full had no ``compare``: its rows keep the keys they were
        # written with (``focus:compare=0``)
        settings = ", ".join(f"{k}={v}" for k, v in vars(self).items() if not k.startswith("_")
                             and (k not in ("compare", *_UNSET_UNSAID) or v))
        return f"{self.name}({settings})"

    def after_retrieval(self, held: Sequence[Passage], new: Sequence[Passage], scorer: Scorer | None = None) -> list[Passage]:
        if not held:
            return super().after_retrieval(held, new, scorer)
        if not new:  # nothing to read instead: the prompt stays as it was
            return list(held)
        return _distinct([*held[: self.question], *new[: self.look]])


@dataclass
class RerankContext(ContextPolicy):
    """Of the held and the new passages, the ``keep`` that leave the model least uncertain about the next
    sentence (each scored alone in the prompt), least uncertain first; with ``keep`` or fewer candidates all
    stay, in retrieval order, and none is scored."""

    name: ClassVar[str] = "rerank"
    skip_held: ClassVar[bool] = True
    needs_scorer: ClassVar[bool] = True
    keep: int = 3
    probe_tokens: int = 4

    def __post_init__(self) -> None:
        check_int("keep", self.keep, minimum=1, hint="It is the number of passages the prompt keeps")
        check_int("probe_tokens", self.probe_tokens, minimum=1, hint="It is the number of tokens whose entropy scores a passage")

    def after_retrieval(self, held: Sequence[Passage], new: Sequence[Passage], scorer: Scorer | None = None) -> list[Passage]:
        if scorer is None:
            raise ValueError("The rerank context policy scores passages with the model: the engine passes a scorer.")
        candidates = _distinct([*held, *new])
        if len(candidates) <= self.keep:  # nothing to choose: kept in retrieval order, unscored
            return candidates
        scores = [scorer([p]) for p in candidates]
        order = sorted(range(len(candidates)), key=lambda i: (scores[i], i))  # ties: the earlier candidate
        return [candidates[i] for i in order[: self.keep]]


CONTEXT_POLICIES: dict[str, type[ContextPolicy]] = {
    cls.name: cls for cls in (ReplaceContext, KeepNewestContext, AccumulateContext, ReadLinksContext, FocusContext,
                               RerankContext)
}


def make_context(spec: str | ContextPolicy | None, *, top_k: int | None = None, **kwargs: Any) -> ContextPolicy:
    """A context policy from its name (``replace``, ``keep-newest``, ``accumulate``, ``rerank``) or an instance;
    ``None`` is ``replace``. A name may carry integer settings after a colon, as the CLI writes them:
    ``"rerank:keep=4"``, ``"accumulate:max_passages=9"``. With the engine's ``top_k`` the settings that follow it
    are resolved (:meth:`ContextPolicy.for_top_k`; an instance given is copied, not changed)."""
    if isinstance(spec, ContextPolicy):
        return spec if top_k is None else spec.for_top_k(top_k)
    key, _, options = ("replace" if spec is None else str(spec).strip().lower()).partition(":")
    if key not in CONTEXT_POLICIES:
        raise UnknownNameError("context policy", str(spec), CONTEXT_POLICIES)
    cls = CONTEXT_POLICIES[key]
    settings = {f.name for f in fields(cls)}
    for item in filter(None, (o.strip() for o in options.split(","))):
        name, eq, value = (part.strip() for part in item.partition("="))
        if not eq or name not in settings:
            valid = ", ".join(sorted(settings)) or "none"
            raise InvalidOptionError(f"Context policy {key!r}: {item!r} is not a setting; write {key}:NAME=INTEGER "
                                     f"with NAME one of: {valid}.")
        try:
            kwargs[name] = int(value)
        except ValueError:
            raise InvalidOptionError(f"Context policy {key!r}: {name} must be an integer, got {value!r}.") from None
    policy = cls(**kwargs)
    return policy if top_k is None else policy.for_top_k(top_k)


def record_held(retrieval: Retrieval, before: Sequence[Passage], held: Sequence[Passage]) -> None:
    """Write into ``retrieval`` what the prompt holds after it (``held_ids``), which of its passages are new there
    (``new_ids``) and which passages the prompt held ``before`` it that left (``evicted_ids``: the context policy's
    bound, the context window), in the order they were held."""
    was = [p.id for p in before]
    retrieval.held_ids = [p.id for p in held]
    retrieval.new_ids = [p.id for p in retrieval.passages if p.id not in was]
    retrieval.evicted_ids = [i for i in was if i not in retrieval.held_ids]


__all__ = [
    "CONTEXT_POLICIES",
    "AccumulateContext",
    "ContextPolicy",
    "FocusContext",
    "KeepNewestContext",
    "ReadLinksContext",
    "ReplaceContext",
    "RerankContext",
    "Scorer",
    "make_context",
    "record_held",
]
