"""The engine's generation cut into model calls: one framework-neutral account of what the model was asked and wrote.

The engine does not call a language model the way an LLM framework does: it decodes with the model directly and
retrieves in the middle of an answer. An adapter that reports the generation to an observability tool (LangChain's
chat-model runs, LlamaIndex's ``LLMCompletion*`` events) reports it as the calls it amounts to. :class:`EventSegmenter`
reads the engine's stream (:meth:`active_rag.ActiveRAG.stream`: :class:`~active_rag.types.RouteDecision`,
:class:`~active_rag.types.Retrieval`, :class:`~active_rag.types.TokenEvent`, :class:`~active_rag.types.TriggerDecision`
and the final :class:`~active_rag.types.ActiveRAGResult`), in order, and says where those calls begin and end, as
neutral events that each adapter maps onto its framework's own:

- :class:`SegmentStart`, :class:`SegmentToken` per accepted token, :class:`SegmentEnd`: one *generation segment*, the
  tokens the engine accepted from one prompt;
- :class:`RouterCall`: the router's verdict (TA-ARE, vanilla), a call of its own: its prompt in, its raw output out.
  It ends no segment.

The rules, the same for every adapter:

- **Where a segment ends.** A token belongs to the segment of the last retrieval whose ``position`` is at or before
  the token's own (``Retrieval.position`` counts the output tokens before the retrieval point). A retrieval that fires
  *after* a segment (FL-RAG, FS-RAG: the check reads a segment, then retrieves) is streamed before that segment's
  tokens, yet closes it at the right token: the tokens before its position still belong to the segment before it.
  Tokens written with other passages (``TokenEvent.passage_ids``) are another segment too, retrieval or not.
- **An answer written again.** An answer written again from its first word (``reanswer``, an answer check: a new
  ``TokenEvent.attempt``) starts a segment of its own, and every retrieval made so far holds for it from its first
  token (the look's retrieval sits at the draft's length, but the second answer is written with it from position 0).
  A token at an earlier position in the same attempt (the engine cut back a partial last sentence before forcing its
  answer phrase) also starts a new segment: the model continues a shorter answer from there.
- **A kept draft streamed again.** When an answer check keeps the draft, the engine streams the draft's tokens once
  more with their own, earlier ``attempt``: they were not generated again and are in no segment, though they are the
  answer so far from then on.
- **What the prompt held.** A segment's prompt is the method's prompt with the passages that prompt held (its first
  token's ``passage_ids``; without them, those of the segment's retrieval) and the answer accepted before it
  (:attr:`SegmentStart.prefix`). Rendering that prompt (chat messages, a text, a token count) is the adapter's.

Only accepted tokens are in segments (a FLARE look-ahead sentence that is regenerated never reaches the stream).
Tracking costs a few list appends per token; nothing is rendered here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .types import ActiveRAGResult, Passage, Retrieval, RouteDecision, TokenEvent, TriggerDecision

#: Why a segment ended: ``"retrieval"`` the prompt's passages changed (a retrieval, or the tokens name other passages);
#: ``"reanswer"`` the answer is written again from its first word; ``"rewind"`` the engine cut the answer back and
#: goes on from an earlier position; ``"end"`` the answer is complete; ``"closed"`` / ``"error"`` the consumer closed
#: it (:meth:`EventSegmenter.close`), e.g. when the run it reports under ends or the engine raised.
EndCause = Literal["retrieval", "reanswer", "rewind", "end", "closed", "error"]

EngineEvent = RouteDecision | Retrieval | TokenEvent | TriggerDecision | ActiveRAGResult


@dataclass(frozen=True)
class SegmentStart:
    """A generation segment begins: the model is prompted with ``passages`` and the answer so far, ``prefix``.

    ``index`` counts the segments started before it in this run; ``position`` is the number of output tokens before
    its first token (the length of ``prefix`` in tokens)."""

    index: int
    attempt: int
    position: int
    passages: tuple[Passage, ...]
    prefix: str

    @property
    def passage_ids(self) -> list[str]:
        """The ids of the passages in the segment's prompt, in the prompt's order."""
        return [p.id for p in self.passages]


@dataclass(frozen=True)
class SegmentToken:
    """One accepted token of segment ``index``; ``text`` is the segment's text so far, this token included."""

    index: int
    token: TokenEvent
    text: str


@dataclass(frozen=True)
class SegmentEnd:
    """Segment ``index`` (begun by ``start``) ends, for ``cause``, with ``tokens``. ``answer_tokens`` is the length of
    the answer accepted so far, in tokens, when it ended (equal to ``max_new_tokens``: the answer hit its length cap)."""

    index: int
    start: SegmentStart
    tokens: tuple[TokenEvent, ...]
    cause: EndCause
    answer_tokens: int

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def token_ids(self) -> list[int]:
        return [t.token_id for t in self.tokens]

    @property
    def logprobs(self) -> list[float]:
        return [t.logprob for t in self.tokens]

    @property
    def entropies(self) -> list[float]:
        return [t.entropy for t in self.tokens]

    @property
    def positions(self) -> list[int]:
        return [t.position for t in self.tokens]


@dataclass(frozen=True)
class RouterCall:
    """The router's verdict as a model call of its own (``decision.prompt`` in, ``decision.raw_output`` out)."""

    decision: RouteDecision

    @property
    def prompt(self) -> str:
        return self.decision.prompt

    @property
    def output(self) -> str:
        return self.decision.raw_output


SegmentEvent = SegmentStart | SegmentToken | SegmentEnd | RouterCall


@dataclass
class _OpenSegment:
    start: SegmentStart
    key: tuple[int, int, tuple[str, ...] | None]  # (attempt, its retrieval's index or -1, the tokens' passage ids)
    tokens: list[TokenEvent] = field(default_factory=list)
    text: str = ""


class EventSegmenter:
    """Cuts one engine run's stream into generation segments and router calls (see the module docstring).

    :meth:`feed` every engine event, in order; each call returns the segment events it completes, in order (often
    none, or one :class:`SegmentToken`; a token that begins a segment gives :class:`SegmentEnd` of the one before,
    :class:`SegmentStart`, then its :class:`SegmentToken`). The final :class:`~active_rag.types.ActiveRAGResult`
    ends the open segment (cause ``"end"``); :meth:`close` ends it early."""

    def __init__(self) -> None:
        self.retrievals: list[Retrieval] = []
        self.passages: dict[str, Passage] = {}  # every retrieved passage, by id
        self.attempt = 0  # the latest answer attempt seen
        self.base = -1  # the latest retrieval made before the current attempt began (-1: none)
        self.answer: list[str] = []  # the text of each token of the answer so far
        self.started = 0  # segments started
        self._open: _OpenSegment | None = None

    @property
    def open(self) -> SegmentStart | None:
        """The open segment's start, or ``None``."""
        return self._open.start if self._open is not None else None

    def feed(self, event: EngineEvent) -> list[SegmentEvent]:
        """The segment events that ``event``, the engine's next, completes."""
        if isinstance(event, TokenEvent):
            return self._token(event)
        if isinstance(event, Retrieval):
            self.retrievals.append(event)
            self.passages.update((p.id, p) for p in event.passages)
            return []
        if isinstance(event, RouteDecision):
            return [RouterCall(event)]
        if isinstance(event, ActiveRAGResult):
            ends: list[SegmentEvent] = [*self.close("end")]
            return ends
        return []  # a trigger decision: a fired one is reported by the retrieval that follows it

    def close(self, cause: EndCause = "closed") -> list[SegmentEnd]:
        """End the open segment, if any, for ``cause``; the next token starts a new one."""
        segment, self._open = self._open, None
        if segment is None:
            return []
        return [SegmentEnd(segment.start.index, segment.start, tuple(segment.tokens), cause, len(self.answer))]

    def _token(self, event: TokenEvent) -> list[SegmentEvent]:
        out: list[SegmentEvent] = []
        rewind = event.position < len(self.answer)
        if rewind:  # an answer from its first word again, the kept draft replayed, or a cut-back answer
            del self.answer[event.position:]
        if event.attempt >= self.attempt:  # else the kept draft streamed once more: generated before, not again
            reanswer = event.attempt > self.attempt
            if reanswer:  # every retrieval so far holds for the new answer from its first token
                self.base = len(self.retrievals) - 1
                self.attempt = event.attempt
            ids = tuple(event.passage_ids) if event.passage_ids is not None else None
            key = (event.attempt, self._source(event.position), ids)
            if self._open is not None and (reanswer or rewind or self._open.key != key):
                out.extend(self.close("reanswer" if reanswer else "rewind" if rewind else "retrieval"))
            if self._open is None:
                self._open = _OpenSegment(self._start(key, event.position), key)
                out.append(self._open.start)
            segment = self._open
            segment.tokens.append(event)
            segment.text += event.text
            out.append(SegmentToken(segment.start.index, event, segment.text))
        self.answer.append(event.text)
        return out

    def _source(self, position: int) -> int:
        """The index of the last retrieval of the current attempt at or before ``position`` (else :attr:`base`)."""
        source = self.base
        for i in range(self.base + 1, len(self.retrievals)):
            if self.retrievals[i].position <= position:
                source = i
        return source

    def _start(self, key: tuple[int, int, tuple[str, ...] | None], position: int) -> SegmentStart:
        attempt, source, ids = key
        passages: list[Passage]
        if ids is not None:  # exactly the passages of the prompt that wrote the token
            passages = [self.passages[i] for i in ids if i in self.passages]
        else:
            passages = list(self.retrievals[source].passages) if source >= 0 else []
        start = SegmentStart(self.started, attempt, position, tuple(passages), "".join(self.answer[:position]))
        self.started += 1
        return start


__all__ = [
    "EndCause",
    "EngineEvent",
    "EventSegmenter",
    "RouterCall",
    "SegmentEnd",
    "SegmentEvent",
    "SegmentStart",
    "SegmentToken",
]
