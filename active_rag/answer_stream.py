"""The answer as a stream of text pieces that join to the engine's answer, for the adapters' streaming APIs.

The engine streams a :class:`~active_rag.types.TokenEvent` per accepted token, as soon as it is accepted: a token
nothing checks (wo-RAG, SR-RAG, ``sr-rag-linked``'s answer, a sentence written after a retrieval) as soon as it is
generated, a checked segment's tokens once its check lets them through. A chunk that was sent cannot be taken back,
so :class:`AnswerStream` holds back exactly the text that a later step of the engine may still cut (a forced answer
phrase cuts nothing: it follows the unfinished sentence, closed with a full stop):

- with the repetition guard, a sentence that repeats an earlier one, or still may (its words so far begin an
  earlier sentence): the engine drops a repeated sentence at the end;
- with a trigger that truncates whole sentences (``dragin-code``), the unfinished last sentence: a later check may
  drop it from its start;
- when the engine may write the answer again from its first word (``reanswer``, an answer check), everything
  until the end.

:meth:`AnswerStream.finish` gives the rest of the engine's answer, so that the pieces always join to
``ActiveRAGResult.answer``.
"""

from __future__ import annotations

from .stopping import last_complete_sentence_end, may_repeat_start
from .types import TokenEvent

__all__ = ["AnswerStream"]


class AnswerStream:
    """Text pieces of one run's answer (see the module docstring).

    Args:
        repetition_guard: the engine drops a sentence that repeats an earlier one (hold such a sentence).
        sentence_truncation: a check may drop the unfinished last sentence from its start (hold it).
        rewrites: send nothing before the end (the engine may write the answer again from its first word).
    """

    def __init__(self, *, repetition_guard: bool = False, sentence_truncation: bool = False,
                 rewrites: bool = False) -> None:
        self.repetition_guard = repetition_guard
        self.sentence_truncation = sentence_truncation
        self.rewrites = rewrites
        self.tokens: list[str] = []
        self.sent = ""

    def safe_end(self, text: str) -> int:
        """How much of the output ``text`` no later step of the engine can cut (see the module docstring)."""
        end = len(text)
        if self.sentence_truncation:
            end = last_complete_sentence_end(text)
        if self.repetition_guard:
            start = may_repeat_start(text[:end])
            if start is not None:
                end = start
        return end

    def push(self, event: TokenEvent) -> str:
        """The new text to send after ``event`` (often ``""``). Leading whitespace is dropped and trailing
        whitespace held back; a token at an earlier position than the last replaces the output from there."""
        if self.rewrites:
            return ""
        del self.tokens[event.position:]
        self.tokens.append(event.text)
        text = "".join(self.tokens)
        body = text[: self.safe_end(text)].strip()
        if not body.startswith(self.sent):  # below what was sent: the engine rewinds only text not yet sent
            return ""
        delta, self.sent = body[len(self.sent):], body
        return delta

    def finish(self, answer: str) -> str:
        """What is left of ``answer`` (the engine's, at the end of the run) after the text sent so far; ``""``
        when ``answer`` does not extend it."""
        return answer[len(self.sent):] if answer.startswith(self.sent) else ""
