"""The answer as a stream of text pieces that join to the engine's answer, for the adapters' streaming APIs.

The engine streams a :class:`~active_rag.types.TokenEvent` per accepted token, but two things can change the
answer after its tokens were streamed: it drops a partial last sentence before forcing its answer phrase
(DRAGIN App. B; the next token then comes at an earlier ``position``), and an answer check or ``reanswer``
writes a second answer from the first word. A chunk that was sent cannot be taken back, so
:class:`AnswerStream` sends only text the engine keeps: with an answer phrase, whole sentences (the engine's own
cut, :func:`~active_rag.stopping.last_complete_sentence_end`); when the engine may rewrite the answer, nothing
until the end. :meth:`AnswerStream.finish` gives the rest of the engine's answer, so that the pieces always join
to ``ActiveRAGResult.answer``.
"""

from __future__ import annotations

from typing import Any

from .stopping import last_complete_sentence_end
from .types import TokenEvent

__all__ = ["AnswerStream"]


class AnswerStream:
    """Text pieces of one run's answer (see the module docstring).

    Args:
        whole_sentences: send a sentence only once it ends (the engine has an answer phrase to force).
        rewrites: send nothing before the end (the engine may write the answer again from its first word).
    """

    def __init__(self, *, whole_sentences: bool = False, rewrites: bool = False) -> None:
        self.whole_sentences = whole_sentences
        self.rewrites = rewrites
        self.tokens: list[str] = []
        self.sent = ""

    @classmethod
    def for_engine(cls, engine: Any) -> AnswerStream:
        """The stream for ``engine`` (an :class:`~active_rag.ActiveRAG`): from its answer phrase and
        ``rewrites_answer``."""
        return cls(whole_sentences=bool(getattr(engine, "answer_phrase", None)),
                   rewrites=bool(getattr(engine, "rewrites_answer", False)))

    def push(self, event: TokenEvent) -> str:
        """The new text to send after ``event`` (often ``""``). Leading whitespace is dropped and trailing
        whitespace held back; a token at an earlier position than the last replaces the output from there."""
        if self.rewrites:
            return ""
        del self.tokens[event.position:]
        self.tokens.append(event.text)
        body = "".join(self.tokens).strip()
        if self.whole_sentences:
            body = body[: last_complete_sentence_end(body)].rstrip()
        if not body.startswith(self.sent):  # below what was sent: the engine rewinds only a sentence not yet sent
            return ""
        delta, self.sent = body[len(self.sent):], body
        return delta

    def finish(self, answer: str) -> str:
        """What is left of ``answer`` (the engine's, at the end of the run) after the text sent so far; ``""``
        when ``answer`` does not extend it."""
        return answer[len(self.sent):] if answer.startswith(self.sent) else ""
