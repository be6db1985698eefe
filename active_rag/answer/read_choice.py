"""What to read next, chosen per question before the answer (beyond the papers; the ``sr-rag-choose`` preset).

The papers' active retrieval decides *when* to retrieve from the model's uncertainty while it writes. On the
multi-hop slices the decision that pays is *what* to add to the question's first passages, and the question's
form says it before a token is written (``ActiveRAG(answer=AnswerStage(links="choose"))``):

- **compare**: the question compares things it names by their own attributes: a choice question
  (:func:`~active_rag.answer.options.question_options`: "Who is older, Annie Morton or Terry Richardson?") or a
  yes/no question that names at least two things ("Are the Laleli Mosque and Esma Sultan Mansion located in the
  same neighborhood?"), and no word of it asks for a relation of theirs (:data:`RELATION_WORDS`: "Which film has
  the director who died later, ...?" asks about two other people). The evidence is the named things' own
  articles: add those (looked up in the name index, no retriever call), then the question's next passages.
  The articles the passages link to are noise for such a question.
- **links**: every other question (a bridge: "What government position was held by the woman who portrayed
  Corliss Archer?") follows the links of its passages (:func:`~active_rag.answer.links.follow_links`): the question's
  own names' articles first, then those of the names its passages mention, then the question's next passages.

Both ways add the same number of passages (``top_k``) with at most one retriever call, so the choice changes what
the reader sees, not the cost. Chosen on the dev slices only, without the model, by evidence recall (BM25 top-3,
then 3 passages added; every gold paragraph held, % of questions):

==============================  ======  ======  ======
slice (corpus)                   next    links   choose
==============================  ======  ======  ======
HotpotQA dev-b (pool)            77.6    93.6    95.2
HotpotQA dev-b (union)           72.8    92.8    94.4
HotpotQA dev-b (union, no title) 52.0    80.8    82.4
HotpotQA dev (union)             52.7    78.7    78.7
2WikiMultihopQA (union)          27.3    80.7    80.7
2Wiki (union, no titles)         27.3    62.0    62.7
==============================  ======  ======  ======

Without the relation words, 2Wiki's comparisons through a film's director (56 choice questions, most of them
such) lose half their evidence (union: 71.4% -> 35.7%), because the directors are named in the films' articles,
not in the question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .options import question_options
from .links import question_names
from ..text import AUXILIARIES

__all__ = ["RELATION_WORDS", "ReadChoice", "choose_reading", "question_form"]

Way = Literal["compare", "links"]

#: nouns that ask for someone a named thing relates to (its director, its founder), whose own article the question
#: does not name ("Which was founded first, Tesla or Ford?" asks about the companies themselves): a comparison through them needs the links of the named things' articles
RELATION_WORDS = frozenset(
    "director directors father mother parent parents spouse wife husband son daughter child children sibling "
    "brother sister composer author writer founder creator producer performer singer actor actress star owner "
    "manufacturer designer".split()
)
_YES_NO = AUXILIARIES
_WORD = re.compile(r"[A-Za-z]+")


def question_form(question: str) -> Literal["choice", "yes-no", "open"]:
    """``"choice"`` when the question offers two options (:func:`~active_rag.answer.options.question_options`),
    ``"yes-no"`` when it opens with an auxiliary verb ("Are ...", "Did ..."), else ``"open"`` (who, what, when)."""
    if question_options(question):
        return "choice"
    words = _WORD.findall(question)
    return "yes-no" if words and words[0].lower() in _YES_NO else "open"


@dataclass(frozen=True)
class ReadChoice:
    """What a question reads after its first passages: ``way`` (``"compare"`` or ``"links"``) and why, in words
    (the trace's ``details["choice"]`` and ``details["choice_reason"]``)."""

    way: Way
    reason: str


def choose_reading(question: str) -> ReadChoice:
    """The rule of the module docstring, from the question alone.

    >>> choose_reading("Who is older, Annie Morton or Terry Richardson?").way
    'compare'
    >>> choose_reading("Which film has the director who died later, The More The Merrier or Sleep, My Love?").way
    'links'
    >>> choose_reading("What government position was held by the woman who portrayed Corliss Archer?").way
    'links'
    """
    form = question_form(question)
    if form == "open":
        return ReadChoice("links", "an open question: follow the links of its passages")
    relation = sorted({w.lower() for w in _WORD.findall(question)} & RELATION_WORDS)
    if relation:
        return ReadChoice("links", f"a {form} question about a relation of what it names ({', '.join(relation)}): "
                                   "follow the links of its passages")
    if form == "yes-no" and len(question_names(question)) < 2:
        return ReadChoice("links", "a yes-no question that names fewer than two things: follow the links of its passages")
    return ReadChoice("compare", f"a {form} question comparing what it names: read their own articles, then the "
                                 "question's next passages")
