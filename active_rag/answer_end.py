"""Where an answer ends: the sentence-end rule of the answer sentence ("So the answer is X."), plain text.

A "." ends the answer only when it is a sentence end. The answer "J. Nick Koston", "Python 3.10", ">=3.9",
"v2.1", "the U.S.", "Apple Inc.", "Wait... what", or the quoted title "Mr. Smith Goes to Washington" keeps its
periods:

- a mark (".", "!", "?") at the end of its line ends the answer; so does a line break;
- otherwise the mark is followed by spaces and then something that starts a sentence (not a lower-case letter or
  a digit: "1.5", "No. 5", "e.g. the" go on), or right away by a sign that goes on no word ("Paris.</s>"; a
  letter, digit, ".", "-", "/" or quote goes on: "3.10", "U.S", "os.path", "..."); and a "." is not
  after an initial (a single capital: "J.", "U.S."), a dotted abbreviation ("e.g.", "i.e."), one of
  :data:`ABBREVIATIONS` ("Mr.", "Inc.") or another "." (an ellipsis);
- a mark inside an open double quote does not end it: a quoted title is one piece, whose last mark may end the
  sentence (``"Hello."`` then a new sentence).

While text is being generated, a mark at the end of the text is not decided yet: the next token tells whether the
answer goes on ("3." then "10"), so a stop rule waits one token and the caller cuts that token off again. At the
end of a generation (``final``) the end of the text ends the answer too.

The engine's stop rule (:func:`active_rag.stopping.has_completed_answer`), the forced answer
(:class:`~active_rag.engine.answer_steps.ForceAnswer`) and the answer span
(:func:`active_rag.answer_span.answer_span`, the result's ``short_answer``) all use it.
"""

from __future__ import annotations

import re

__all__ = ["ABBREVIATIONS", "ANSWER_PHRASE_PATTERN", "COMPLETED_ANSWER_PATTERN", "answer_body_end",
           "completed_answer_end", "keeps_period"]

#: Words whose "." does not end the answer before a capital ("Mr. Smith", "Apple Inc. Ltd", "St. Louis"), case
#: as written. "No" is not one: "So the answer is No." ends the answer; "No. 5" goes on because a digit follows.
ABBREVIATIONS: tuple[str, ...] = (
    "Mr", "Mrs", "Ms", "Dr", "St", "Jr", "Sr", "Inc", "Ltd", "Co", "Corp", "vs", "etc", "Vol", "Mt", "Ft", "Gen",
    "Col", "Lt", "Capt", "Prof", "Rev", "Hon", "Gov", "Sen", "Rep", "Bros", "Ave", "Dept", "Univ", "approx", "al",
    "cf", "ca",
)

#: "the answer is" as words, any case (also "the final answer is"): what the answer follows.
ANSWER_PHRASE_PATTERN = r"(?i:\bthe\s+(?:final\s+)?answer\s+is\b)"

# a "." after one of these is not a sentence end: an initial ("J.", "U.S."), "e.g.", an abbreviation, an ellipsis
# (each look-behind holds the "." itself, so that they are only tried at a ".")
_NOT_AFTER = (r"(?<!\b[A-Z]\.)(?<!\b[a-z]\.[a-z]\.)(?<!\.\.)"
              + "".join(rf"(?<!\b{re.escape(word)}\.)" for word in ABBREVIATIONS))
# one piece of the answer: a quoted title as a whole (also one left open to the line end), or one character
_PIECE = r'(?:"[^"\n]*"|“[^”\n]*”|"[^"\n]*(?=\n|$)|“[^”\n]*(?=\n|$)|[^"“\n])'
_CLOSERS = r"[)\]'’]*"
# what a sentence end is followed by while generating: a line break, spaces then a sentence's start, or a sign that
# does not go on a word, number or name ("Paris.</s>", a broken character): "3.10", "os.path", "...", "3.x-dev",
# "Inc.," and quotes go on
_NOT_GOING_ON = r"""[^\s\w.,;:/\-"“”'’]"""
_FOLLOW = rf"(?=[ \t]*\n|[ \t]+[^\sa-z0-9]|{_NOT_GOING_ON})"
_FOLLOW_FINAL = rf"(?=[ \t]*(?:\n|$)|[ \t]+[^\sa-z0-9]|{_NOT_GOING_ON})"
_LINE_END = r"(?=[ \t]*\n)"
_LINE_END_FINAL = r"(?=[ \t]*(?:\n|$))"


def _end_pattern(follow: str, line_end: str) -> str:
    # a mark before a new sentence, or any mark at the end of its line ("Acme Inc.\n")
    mark = rf"(?:(?:\.{_NOT_AFTER}|[!?]){_CLOSERS}{follow}|[.!?]{_CLOSERS}{line_end})"
    quoted = rf'(?:"[^"\n]*[.!?]"|“[^”\n]*[.!?]”){_CLOSERS}{follow}'
    # an answer begins with a word, a quote or an ellipsis (never with a bare mark), then its pieces, lazily, then
    # its end: a line break (kept), a sentence-end mark, or a quoted piece ending in one
    return rf"(?=[^\s!?.]|\.\.){_PIECE}*?(?:\n|{mark}|{quoted})"


_BODY_END = re.compile(_end_pattern(_FOLLOW, _LINE_END))
_BODY_END_FINAL = re.compile(_end_pattern(_FOLLOW_FINAL, _LINE_END_FINAL))

#: A completed answer sentence while generating: the answer phrase, an answer that has begun (after a ":" or line
#: breaks: "So the answer is:\n\nX" answers X), then its end by the rule above. The match ends just after the end
#: mark (with closing quotes or brackets), or after the line break.
COMPLETED_ANSWER_PATTERN = re.compile(ANSWER_PHRASE_PATTERN + r"[ \t:\n]*+" + _end_pattern(_FOLLOW, _LINE_END))

_KEEPS_PERIOD = re.compile(r"(?:" + r"|".join([r"\b[A-Za-z]\.[A-Za-z]", r"\."]
                                              + [rf"\b{re.escape(w)}" for w in ABBREVIATIONS]) + r")\.$")


def completed_answer_end(text: str) -> int | None:
    """Character offset where the first completed answer sentence of ``text`` ends (just after its end mark, or
    after its line break), or ``None`` when no answer is complete yet (a mark at the end of the text waits for the
    next token)."""
    match = COMPLETED_ANSWER_PATTERN.search(text)
    return None if match is None else match.end()


def answer_body_end(text: str, start: int = 0, end: int | None = None, *, final: bool = False) -> int | None:
    """Character offset where the answer that begins at ``text[start]`` ends (just after its end mark, or after a
    line break), looking no further than ``end``; ``None`` when not decided yet. ``final``: the text is the whole
    generation, so its end ends the answer too."""
    stop = len(text) if end is None else end
    if start >= stop:
        return None
    match = (_BODY_END_FINAL if final else _BODY_END).match(text, start, stop)
    return None if match is None else match.end()


def keeps_period(text: str) -> bool:
    """Whether ``text`` ends with a "." that belongs to the answer ("U.S.", "e.g.", "Inc.", "..."), not a full stop.
    A single letter's "." is a full stop here: "So the answer is B." answers "B"."""
    return _KEEPS_PERIOD.search(text) is not None
