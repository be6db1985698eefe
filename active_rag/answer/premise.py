"""A question's premise points at what it asks about; once that is read, the premise's own pages leave the prompt.

"referencing depends on a package described as "Python bindings to Rust's persistent data structures (rpds)".
What is the minimum Python version that package requires?" names referencing only to point at the package it
describes (rpds-py). The first retrieval reads both packages' pages, since the question names one and quotes the
other's summary, and both pages state a ``Requires-Python``; the reader then gives the one of the package the
question names (referencing's 3.10 for rpds-py's 3.11). On pydocs dev the qwen2.5-coder-1.5b default answered 7
of its 30 "minimum Python version of that package" questions from the named package's page, every time with the
described package's page in its prompt beside it.

:func:`premise_pages` finds, in a prompt, the pages of a document that only the question's premise names, when the
prompt also holds a passage of another document that carries the question's quotation word for word (the
described thing's own page). A linked look (:meth:`active_rag.engine.retrieving.Retrieving.linked`) leaves those
pages out of the prompt, recorded in its trace (``details["premise_pages"]``, the passages' ``evicted_ids`` or
``dropped``). A question without a premise (one sentence, or no asking sentence after it:
:func:`~active_rag.answer.links.asking_sentence`) or without a quotation changes nothing; a name the asking
sentence or the quotation holds is not the premise's ("X depends on a package described as "...". Does that
package have the same author as X?" keeps X's pages). Of the shared dev questions only pydocs' 60 two-hop
questions have both a premise and a quotation (HotpotQA, 2WikiMultihopQA, StrategyQA: none).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..retrieval.name_index import file_base, is_file_name
from ..types import Passage
from .links import QUOTED, asking_sentence

__all__ = ["MIN_QUOTE_WORDS", "PREMISE_REASON", "described_passages", "premise_pages", "quotations"]

#: a quotation shorter than this (in words) is a name, not a description: it identifies no page by itself
MIN_QUOTE_WORDS = 3
#: the trace's ``dropped_reason`` for such a page (a passage the context policy would have kept)
PREMISE_REASON = "a page of what only the question's premise names, once the page it describes is read (premise_pages)"

_PARENTHESIS = re.compile(r"\s*\([^)]*\)\s*$")
_SPACE = re.compile(r"\s+")


def _plain(text: str) -> str:
    """``text`` lower-cased, with ``-`` and ``_`` read as spaces and runs of white space as one."""
    return _SPACE.sub(" ", re.sub(r"[-_]", " ", text.lower())).strip()


def quotations(question: str) -> list[str]:
    """The quotations of ``question`` of at least :data:`MIN_QUOTE_WORDS` words, plain (:func:`_plain`).

    >>> quotations('kubernetes depends on a package described as "Python HTTP for Humans". Who wrote it?')
    ['python http for humans']
    """
    out = [_plain(a or b) for a, b in QUOTED.findall(question)]
    return [q for q in out if len(q.split()) >= MIN_QUOTE_WORDS]


def _name_form(text: str) -> str:
    """``text`` lower-cased with ``_`` read as ``-`` and runs of white space as one: how names compare here
    (``typing_extensions`` is ``typing-extensions``, and ``requests`` is not ``requests-oauthlib``)."""
    return _SPACE.sub(" ", text.lower().replace("_", "-")).strip()


def _page_name(passage: Passage) -> str:
    """What a passage's title names: its file's stem for a file name (``docs/teams.md (2/5)``: ``teams``), else the
    title without a trailing parenthesis (a chunk's ``referencing (2/5)``: ``referencing``)."""
    title = passage.title or ""
    return _name_form(file_base(title) if is_file_name(title) else _PARENTHESIS.sub("", title))


def _names(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` (both in :func:`_name_form`) as a whole name, not a part of a longer one."""
    return bool(name) and re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None


def described_passages(question: str, passages: Sequence[Passage]) -> list[Passage]:
    """The passages of ``passages`` whose text holds a quotation of ``question`` (:func:`quotations`) word for word."""
    quoted = quotations(question)
    return [p for p in passages if quoted and any(q in _plain(p.text) for q in quoted)]


def premise_pages(question: str, passages: Sequence[Passage]) -> list[Passage]:
    """The passages of ``passages`` whose document only the premise of ``question`` names, when another document's
    passage holds the question's quotation (the described thing's page); empty otherwise.

    A passage's document is what its title names (:func:`_page_name`); the premise is the question without its
    asking sentence (:func:`~active_rag.answer.links.asking_sentence`) and without its quotations; a name the
    asking sentence or a quotation holds is not the premise's.

    >>> q = ('referencing depends on a package described as "Python bindings to Rust\\'s data structures". '
    ...      'What is the minimum Python version that package requires?')
    >>> pages = [Passage(id="r", title="referencing (2/5)", text="Requires-Python: >=3.10"),
    ...          Passage(id="p", title="rpds-py (1/3)", text="Summary: Python bindings to Rust's data structures")]
    >>> [p.id for p in premise_pages(q, pages)]
    ['r']
    >>> premise_pages(q, pages[:1])  # the described page is not read: the premise's page stays
    []
    """
    asking = asking_sentence(question)
    if asking is None:
        return []
    quoted = quotations(question)
    if not quoted:
        return []
    premise = _name_form(QUOTED.sub(" ", question.replace(asking, " ")))
    kept_out = _name_form(asking) + " " + " ".join(_name_form(a or b) for a, b in QUOTED.findall(question))

    def of_premise(p: Passage) -> bool:
        name = _page_name(p)
        return _names(premise, name) and not _names(kept_out, name)

    pages = [p for p in passages if of_premise(p)]
    if not pages or not any(not of_premise(p) for p in described_passages(question, passages)):
        return []
    return pages
