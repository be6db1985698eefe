"""Triggers decide *when* to retrieve. Each one looks at a generated segment and returns a
:class:`~active_rag.types.TriggerDecision`; its ``action`` tells the loop what to do when it fires:

- ``"never"`` / ``"once"``: no decisions during generation (wo-RAG, single-round RAG);
- ``"continue"``: keep the segment, retrieve for what comes next (FL-RAG, FS-RAG/IRCoT, self-ask);
- ``"regenerate"``: discard the look-ahead, retrieve, and regenerate it (FLARE-direct);
- ``"truncate"``: cut the output just before the triggering token, retrieve, continue (DRAGIN, FLARE-instruct);
- ``"follow"``: keep the sentence, retrieve the own article of the entity it introduced, and start the next
  sentence with that entity (the ``bridge`` trigger).

A trigger also says how a segment is generated: ``unit`` ("answer", "tokens" or "sentence") and
``max_tokens``. Any trigger combines with any query formulator.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from ..errors import InvalidOptionError, UnknownNameError
from ..signals import normalized_rind_scores, rind_scores, semantic_indicator
from ..types import TokenStep, TriggerDecision
from ..validation import check_trigger

Action = Literal["never", "once", "continue", "regenerate", "truncate", "follow"]
Unit = Literal["answer", "tokens", "sentence"]


@dataclass
class SegmentContext:
    """What a trigger sees: the new segment, and the session's running ``a_max`` vector (DRAGIN Eq. 3)."""

    segment: list[TokenStep]
    max_attention: torch.Tensor | None = None
    output_text: str = ""
    finished: bool = False
    question: str = ""
    followed: tuple[str, ...] = ()
    """Entities the answer has already followed (the ``bridge`` trigger)."""


RIND_SCALES = ("sentence", "raw")
RIND_TRUNCATIONS = ("word", "sentence")


def _check_auto(trigger: Any) -> None:
    """``theta="auto"`` is resolved later, by the engine, from the calibration cache; any other value is checked."""
    if trigger.theta == "auto":
        return
    if isinstance(trigger.theta, str):
        raise InvalidOptionError(f"{trigger.name} theta must be a number or 'auto', got {trigger.theta!r}.")
    check_trigger(trigger)
    if trigger.threshold_source == "default" and float(trigger.theta) != float(trigger.default_theta):
        trigger.threshold_source = "user"


def _numeric_theta(trigger: Any) -> float:
    if trigger.theta == "auto":  # not resolved by an engine: the paper's default
        return float(trigger.default_theta)
    return float(trigger.theta)


@dataclass
class Trigger:
    """Base class. Subclasses set ``name``, ``action``, ``unit`` and implement :meth:`check`."""

    name: ClassVar[str] = "trigger"
    action: ClassVar[Action] = "continue"
    unit: ClassVar[Unit] = "tokens"
    needs_attention: ClassVar[bool] = False
    recheck_after_retrieval: ClassVar[bool] = True
    # a truncating trigger whose source uses a retrieval's documents for the one sentence after it only (DRAGIN);
    # the others keep them until the next retrieval (FLARE-instruct, self-ask)
    documents_for_one_sentence: ClassVar[bool] = False
    max_tokens: int = 64

    def __post_init__(self) -> None:
        check_trigger(self)  # InvalidOptionError for theta=nan, a negative theta, max_tokens=0, ...

    def check(self, ctx: SegmentContext) -> TriggerDecision:  # pragma: no cover - abstract
        raise NotImplementedError

    def segment_done(self, text: str) -> bool:
        """Extra stop rule for a segment (e.g. a closed ``[Search(...)]`` tag)."""
        return False

    def logits_processor(self, lm: Any) -> Any:
        """A stateful logits processor for the whole answer, or ``None``."""
        return None

    def describe(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{self.name}({fields})"

    def _fire(self, **kw: Any) -> TriggerDecision:
        return TriggerDecision(fire=True, trigger=self.name, **kw)

    def _hold(self, **kw: Any) -> TriggerDecision:
        return TriggerDecision(fire=False, trigger=self.name, **kw)


@dataclass
class NeverTrigger(Trigger):
    """wo-RAG (DRAGIN §4.3): answer without retrieval."""

    name: ClassVar[str] = "never"
    action: ClassVar[Action] = "never"
    unit: ClassVar[Unit] = "answer"

    def check(self, ctx: SegmentContext) -> TriggerDecision:
        return self._hold(reason="never retrieves")


@dataclass
class OnceTrigger(Trigger):
    """SR-RAG, single-round retrieval (FLARE §2.2, DRAGIN §4.3): retrieve once with the input, before generating."""

    name: ClassVar[str] = "once"
    action: ClassVar[Action] = "once"
    unit: ClassVar[Unit] = "answer"

    def check(self, ctx: SegmentContext) -> TriggerDecision:
        return self._hold(reason="single-round retrieval happens before generation")


@dataclass
class FixedLengthTrigger(Trigger):
    """FL-RAG, previous-window retrieval (FLARE §4, Ram et al. 2023): retrieve every ``l = 16`` tokens."""

    name: ClassVar[str] = "fixed-length"
    action: ClassVar[Action] = "continue"
    unit: ClassVar[Unit] = "tokens"
    max_tokens: int = 16

    def check(self, ctx: SegmentContext) -> TriggerDecision:
        if not ctx.segment or ctx.finished:
            return self._hold(reason="generation ended")
        last = len(ctx.segment) - 1
        return self._fire(index=None, token=ctx.segment[last].text, reason=f"every {self.max_tokens} tokens")


@dataclass
class FixedSentenceTrigger(Trigger):
    """FS-RAG, previous-sentence retrieval (IRCoT; FLARE §4): retrieve after every sentence."""

    name: ClassVar[str] = "fixed-sentence"
    action: ClassVar[Action] = "continue"
    unit: ClassVar[Unit] = "sentence"
    max_tokens: int = 64

    def check(self, ctx: SegmentContext) -> TriggerDecision:
        if not ctx.segment or ctx.finished:
            return self._hold(reason="generation ended")
        return self._fire(index=None, token=ctx.segment[-1].text, reason="every sentence")


@dataclass
class BridgeTrigger(Trigger):
    """Follow the bridge (beyond the papers): after each sentence, fire when it names an entity that
    the question does not (:func:`~active_rag.entities.entities_of`, names only) and the answer has not followed
    yet; at most ``max_follows`` times an answer. The loop then retrieves with the entities (the ``entity``
    query), keeps only a passage that is the entity's own article (its title names it), and, when the prompt
    holds one, starts the next sentence with the entity (``seed``), as DRAGIN's chain-of-thought exemplars do:
    "The film Hypocrite was directed by Miguel Morayta. Miguel Morayta died on 19 June 2013." (App. F).

    Why: a small model answers a two-hop question with the bridge ("The husband of Octavie Coudreau was Henri
    Coudreau. So the answer is Henri Coudreau."); on 2WikiMultihopQA 35 of qwen2.5-coder-0.5b's 124 wrong
    SR-RAG answers are the title of a gold passage, the bridge's own article. The sentence that names the answer
    ("So the answer is ...") is never checked. A sentence checked after generation ended can still fire: the
    answer goes on from the seed."""

    name: ClassVar[str] = "bridge"
    action: ClassVar[Action] = "follow"
    unit: ClassVar[Unit] = "sentence"
    max_tokens: int = 64
    max_follows: int = 2
    seed: bool = True

    def check(self, ctx: SegmentContext) -> TriggerDecision:
        from ..entities import entities_of, same_entity

        if not ctx.segment:
            return self._hold(reason="empty segment")
        sentence = "".join(s.text for s in ctx.segment)
        if _ANSWER_SENTENCE.search(sentence):
            return self._hold(reason="the answer sentence")
        if len(ctx.followed) >= self.max_follows:
            return self._hold(reason=f"followed {len(ctx.followed)} of max_follows={self.max_follows} bridges")
        names = [e for e in entities_of(sentence, ctx.question, names_only=True)
                 if not any(same_entity(e, f) for f in ctx.followed)]
        if not names:
            return self._hold(reason="names nothing the question does not")
        return self._fire(token=names[-1], entities=names, reason=f"names {', '.join(map(repr, names))}, "
                          "which the question does not")


_ANSWER_SENTENCE = re.compile(r"(?i)\bthe\s+(?:final\s+)?answer\s+is\b")


@dataclass
class LowConfidenceTrigger(Trigger):
    """FLARE-direct (Jiang et al. 2023, §3.2, Eq. 3): generate a look-ahead sentence (at most 64 tokens,
    App. A) and retrieve if any of its tokens has probability below ``theta``.

    ``theta = 0.8`` is the setting of FLARE's released 2WikiMultihopQA configuration. ``theta="auto"`` uses the
    model's calibrated threshold (:mod:`active_rag.engine.calibration`) when one is cached, else 0.8. The look-ahead
    is generated without retrieved documents (FLARE §3); only its regeneration sees the new documents."""

    name: ClassVar[str] = "low-confidence"
    action: ClassVar[Action] = "regenerate"
    unit: ClassVar[Unit] = "sentence"
    default_theta: ClassVar[float] = 0.8
    theta: float | str = 0.8
    max_tokens: int = 64
    threshold_source: str = "default"

    def __post_init__(self) -> None:
        _check_auto(self)

    def check_scores(self, ctx: SegmentContext) -> list[float]:
        """The score of this look-ahead's one check (calibration): its lowest token probability."""
        return [min(s.prob for s in ctx.segment)] if ctx.segment else []

    def check(self, ctx: SegmentContext) -> TriggerDecision:
        if not ctx.segment:
            return self._hold(reason="empty segment")
        theta = _numeric_theta(self)
        probs = [s.prob for s in ctx.segment]
        i = min(range(len(probs)), key=probs.__getitem__)
        signals = {"prob": probs, "entropy": [s.entropy for s in ctx.segment]}
        kw = dict(index=i, token=ctx.segment[i].text, score=probs[i], threshold=theta, token_scores=probs,
                  token_signals=signals, threshold_source=self.threshold_source)
        if probs[i] < theta:
            return self._fire(reason=f"token {ctx.segment[i].text!r} has p={probs[i]:.3f} < theta={theta:g}", **kw)
        return self._hold(reason=f"all token probabilities >= theta={theta:g}", **kw)


@dataclass
class RindTrigger(Trigger):
    """DRAGIN's RIND (Su et al. 2024, §3.1): retrieve at the first token whose score exceeds ``theta``.

    The signals are the entropy ``H_i`` (Eq. 1), the largest attention any later token pays it in the last
    layer, ``a_max(i) = max_{j>i} A_{j,i}`` (Eq. 2-3), and the stop-word indicator ``s_i`` (Eq. 4, spaCy's
    list). ``scale`` picks how they combine:

    - ``"sentence"`` (default), the scale of DRAGIN's released code (github.com/oneal2000/DRAGIN,
      ``src/generate.py``: ``BasicGenerator.generate_attn`` and ``AttnWeightRAG.modifier``), to which its Table 9
      thresholds (0.6-1.5) refer. Tokens are merged into whitespace words (word entropy = mean of its tokens',
      word attention = sum of its tokens'), the segment is split into sentences, each sentence's word
      attentions are divided by their sum and multiplied by the number of words (they average 1), and a word
      scores ``H * a_normalised * s``. The first sentence with a word above ``theta`` is the hallucinated one
      and retrieval happens at the first such word (its first token: truncation never cuts a word).
      Differences from the released code: ``a_max`` is read from the one generation pass over the whole
      context (the code re-runs the model on the generated text alone and its max includes the diagonal, so
      the first generated word always gets attention 1); stop words get ``s = 0`` as in Eq. 5 (the code keeps
      them in the threshold test and only masks them afterwards with a part-of-speech filter).
    - ``"raw"``: Eq. 5 literally, ``S_RIND = H_i * a_max(i) * s_i`` per token with raw softmax attention over
      the whole prompt. Scores are then far below the paper's thresholds (about 0.5 at most on small models):
      calibrate (``theta="auto"``, ``active-rag calibrate``) or pick a small theta.

    ``theta="auto"`` uses the calibrated threshold of the model (:mod:`active_rag.engine.calibration`) when one is
    cached, else the default 1.2 (Table 9, HotpotQA, Llama2-13b-chat); ``threshold_source`` says which.
    Segments are 100 tokens (Table 9 generation length). After a retrieval the loop keeps the first sentence
    of the continuation and checks again, as the released code does.

    ``truncate`` picks what is kept of the output when RIND fires: ``"word"`` (default, §3.3 "truncate the
    output at the token t_i"; here at the start of its word) or ``"sentence"``, what the released code does
    (``AttnWeightRAG.modifier`` returns only the sentences before the hallucinated one, so the whole sentence
    that holds the token is dropped and regenerated with the retrieved documents; preset ``dragin-code``)."""

    name: ClassVar[str] = "rind"
    action: ClassVar[Action] = "truncate"
    unit: ClassVar[Unit] = "tokens"
    needs_attention: ClassVar[bool] = True
    recheck_after_retrieval: ClassVar[bool] = False  # the continuation's first sentence is accepted unchecked
    # the released code prompts with the documents for the one sentence regenerated after a retrieval only
    # (oneal2000/DRAGIN src/generate.py, AttnWeightRAG.inference): the replace context policy follows it
    documents_for_one_sentence: ClassVar[bool] = True
    default_theta: ClassVar[float] = 1.2
    theta: float | str = 1.2
    max_tokens: int = 100
    scale: str = "sentence"
    truncate: str = "word"
    threshold_source: str = "default"

    def __post_init__(self) -> None:
        if self.scale not in RIND_SCALES:
            raise InvalidOptionError(f"rind scale must be one of {', '.join(RIND_SCALES)}, got {self.scale!r}.")
        if self.truncate not in RIND_TRUNCATIONS:
            raise InvalidOptionError(
                f"rind truncate must be one of {', '.join(RIND_TRUNCATIONS)}, got {self.truncate!r}."
            )
        _check_auto(self)

    def describe(self) -> str:
        """As :meth:`Trigger.describe`, without ``truncate`` at its default, so that the settings (and the eval's
        resume keys) of runs made before the option existed stay the same."""
        text = super().describe()
        return text.replace(", truncate=word", "") if self.truncate == "word" else text

    def signals(self, ctx: SegmentContext) -> dict[str, list[float]]:
        """The segment's per-token signals: ``prob``, ``entropy`` (Eq. 1), ``max_attention`` (Eq. 3),
        ``semantic`` (Eq. 4) and ``rind`` (Eq. 5 on the chosen ``scale``)."""
        seg = ctx.segment
        if ctx.max_attention is None:
            raise ValueError("RindTrigger needs the session's attention (capture_attention=True).")
        a_max = [float(ctx.max_attention[s.position]) if s.position < ctx.max_attention.shape[0] else 0.0 for s in seg]
        pieces = [s.text for s in seg]
        semantic = semantic_indicator(pieces)
        entropies = [s.entropy for s in seg]
        if self.scale == "raw":
            scores = rind_scores(entropies, a_max, semantic)
        else:
            scores = normalized_rind_scores(pieces, entropies, a_max)[0]
        return {
            "prob": [s.prob for s in seg],
            "entropy": entropies,
            "max_attention": a_max,
            "semantic": [float(v) for v in semantic],
            "rind": scores,
        }

    def scores(self, ctx: SegmentContext) -> list[float]:
        return self.signals(ctx)["rind"]

    def check_scores(self, ctx: SegmentContext) -> list[float]:
        """The score of every check this segment offers (calibration, :mod:`active_rag.engine.calibration`): the
        largest word score of each sentence (``scale="sentence"``: the released code decides per sentence), or
        the segment's largest token score (``"raw"``)."""
        if not ctx.segment:
            return []
        scores = self.scores(ctx)
        if self.scale == "raw":
            return [max(scores)]
        _, words, sentences = normalized_rind_scores([s.text for s in ctx.segment], [0.0] * len(scores), [0.0] * len(scores))
        return [max(scores[words[w][0]] for w in sentence) for sentence in sentences]

    def check(self, ctx: SegmentContext) -> TriggerDecision:
        if not ctx.segment:
            return self._hold(reason="empty segment")
        theta = _numeric_theta(self)
        signals = self.signals(ctx)
        scores = signals["rind"]
        kw: dict[str, Any] = dict(threshold=theta, token_scores=scores, token_signals=signals,
                                  threshold_source=self.threshold_source)
        label = "S_RIND" if self.scale == "raw" else "S_RIND (sentence-normalised)"
        for i, score in enumerate(scores):
            if score > theta:
                return self._fire(index=i, token=ctx.segment[i].text, score=score,
                                  reason=f"{label}({ctx.segment[i].text!r}) = {score:.3f} > theta={theta:g}", **kw)
        best = max(range(len(scores)), key=scores.__getitem__)
        return self._hold(index=best, token=ctx.segment[best].text, score=scores[best],
                          reason=f"max {label} = {scores[best]:.3f} <= theta={theta:g}", **kw)


_SEARCH_TAG = re.compile(r"\[\s*Search\s*\((.*?)\)\s*\]", re.IGNORECASE | re.DOTALL)
_OPEN_TAG = re.compile(r"\[\s*Search\s*\((.*?)\)?\s*$", re.IGNORECASE | re.DOTALL)  # unclosed: no "]" yet


def _token_at_char(segment: Sequence[TokenStep], char: int) -> int:
    pos = 0
    for i, s in enumerate(segment):
        pos += len(s.text)
        if pos > char:
            return i
    return max(len(segment) - 1, 0)


@dataclass
class SearchTagTrigger(Trigger):
    """FLARE-instruct (§3.1, App. A): the model writes ``[Search(query)]`` when it needs information.

    The logit of "[" is raised by ``bias = 2.0``; after each search "[" is forbidden (a large negative
    logit) for the next ``forbid_tokens`` tokens. The tag is removed from the output (action ``truncate``)."""

    name: ClassVar[str] = "search-tag"
    action: ClassVar[Action] = "truncate"
    unit: ClassVar[Unit] = "tokens"
    max_tokens: int = 64
    bias: float = 2.0
    forbid_tokens: int = 8
    forbid_value: float = -100.0

    def segment_done(self, text: str) -> bool:
        return _SEARCH_TAG.search(text) is not None

    def check(self, ctx: SegmentContext) -> TriggerDecision:
        text = "".join(s.text for s in ctx.segment)
        match = _SEARCH_TAG.search(text) or _OPEN_TAG.search(text)
        if match is None:
            return self._hold(reason="no [Search(...)] tag")
        query = match.group(1).strip().strip("\"'").strip()
        i = _token_at_char(ctx.segment, match.start())
        return self._fire(index=i, token=ctx.segment[i].text, query_hint=query or None, reason=f"model asked [Search({query})]")

    def logits_processor(self, lm: Any) -> Any:
        return BracketBias(lm, bias=self.bias, forbid_tokens=self.forbid_tokens, forbid_value=self.forbid_value)


@dataclass
class BracketBias:
    """FLARE-instruct's logit adjustment on every token whose text starts with "[" (App. A)."""

    lm: Any
    bias: float = 2.0
    forbid_tokens: int = 8
    forbid_value: float = -100.0
    forbid_left: int = 0
    _ids: torch.Tensor | None = field(default=None, repr=False)

    def bracket_ids(self) -> torch.Tensor:
        if self._ids is None:
            tok = self.lm.tokenizer
            vocab = tok.get_vocab() if hasattr(tok, "get_vocab") else {}
            ids = []
            for _, i in vocab.items():
                text = self.lm.decode([i], skip_special_tokens=False).lstrip()
                if text.startswith("["):
                    ids.append(i)
            self._ids = torch.tensor(sorted(set(ids)), dtype=torch.long, device="cpu")
        return self._ids

    def after_search(self) -> None:
        self.forbid_left = self.forbid_tokens

    def __call__(self, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        idx = self.bracket_ids().to(logits.device)
        idx = idx[idx < logits.shape[0]]
        if self.forbid_left > 0:
            logits[idx] = self.forbid_value
            self.forbid_left -= 1
        else:
            logits[idx] += self.bias
        return logits


_FOLLOW_UP = re.compile(r"Follow up:\s*(.+?)\s*(?:\n|Intermediate answer:|$)", re.IGNORECASE)


@dataclass
class FollowUpTrigger(Trigger):
    """Self-ask (Press et al. 2022; FLARE §4 question decomposition): retrieve for every generated
    ``Follow up:`` question; generation pauses at ``Intermediate answer:`` and resumes with the documents."""

    name: ClassVar[str] = "follow-up"
    action: ClassVar[Action] = "continue"
    unit: ClassVar[Unit] = "tokens"
    max_tokens: int = 64

    def segment_done(self, text: str) -> bool:
        return bool(re.search(r"Follow up:.*\S.*(\n|Intermediate answer:)", text, re.IGNORECASE | re.DOTALL))

    def check(self, ctx: SegmentContext) -> TriggerDecision:
        text = "".join(s.text for s in ctx.segment)
        matches = list(_FOLLOW_UP.finditer(text))
        if not matches:
            return self._hold(reason="no follow-up question")
        m = matches[-1]
        i = _token_at_char(ctx.segment, m.start())
        return self._fire(index=i, token=ctx.segment[i].text, query_hint=m.group(1).strip(), reason="follow-up question")


TRIGGERS: dict[str, type[Trigger]] = {
    cls.name: cls
    for cls in (
        NeverTrigger,
        OnceTrigger,
        FixedLengthTrigger,
        FixedSentenceTrigger,
        BridgeTrigger,
        LowConfidenceTrigger,
        RindTrigger,
        SearchTagTrigger,
        FollowUpTrigger,
    )
}
TRIGGER_ALIASES = {"flare": "low-confidence", "dragin": "rind", "fl-rag": "fixed-length", "fs-rag": "fixed-sentence",
                   "wo-rag": "never", "sr-rag": "once", "flare-instruct": "search-tag", "self-ask": "follow-up"}


def make_trigger(spec: str | Trigger, **kwargs: Any) -> Trigger:
    """A trigger from its name (``rind``, ``low-confidence``, ... or a method alias) or an instance."""
    if isinstance(spec, Trigger):
        return spec
    key = TRIGGER_ALIASES.get(spec, spec)
    if key not in TRIGGERS:
        raise UnknownNameError("trigger", spec, list(TRIGGERS) + list(TRIGGER_ALIASES))
    return TRIGGERS[key](**kwargs)
