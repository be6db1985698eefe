"""Follow the links of the passages the model read (issue 28, beyond the papers).

A multi-hop question names its first hop; the passage about the first hop names the bridge, and the bridge's own
article holds the answer. In Wikipedia the passage links to that article: "Kiss and Tell is a 1945 American comedy
film starring then 17-year-old Shirley Temple" leads to the article titled "Shirley Temple", where her government
post is. The question's words rank the bridge's article low (it shares one name with the question, if any), so
retrieving the question's next passages rarely finds it; the name in the passage does.

:func:`linked_articles` is the second look's query ``"linked"`` (:class:`~active_rag.answer_check.AnswerCheck`):
the names the prompt's passages mention and the question does not (:func:`~active_rag.entities.entities_of`,
names only, in passage then text order) are each asked of the retriever alone, and of what comes back only the
name's own article is kept (:func:`~active_rag.entities.is_article_of`: a one-word name's article is titled with it
alone, so "American" does not bring "American Scary"); the articles are ranked by how many of
the question's content words they share (the order of their names breaks ties), and the question's own
next-ranked passages fill what is left of ``k``. It needs no index of titles or links: any retriever that returns
passages with titles will do.

Why, measured with BM25 top-3 as the first retrieval (no model; ``python -m active_rag.evaluation.linked_recall``):
three more passages give every gold paragraph to 54.0% of the 150 HotpotQA dev questions when they are the
question's next-ranked ones (SR-RAG with six) and to 76.0% when they are these; 2WikiMultihopQA 31.3% and 82.0%.
Of the linked articles, 0.79 a question (HotpotQA) hold no gold paragraph: the one-word rule keeps that noise
down. What it buys depends on the reader: the 0.5B model's F1 stays that of ``look-again-grounded``, the 1.5B
model's rises to 51.4 on HotpotQA 150 against SR-RAG's 42.8 (+8.6 [+3.3, +13.8]; docs/context.md, "Follow the
passages' links").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .entities import content_words, entities_of, is_article_of
from .errors import InvalidOptionError
from .rankings import fetch_rankings
from .text import split_sentences
from .types import Passage

__all__ = ["check_follow_links", "linked_articles", "linked_names", "linked_sources"]

#: passages asked for per name: the name's own article is almost always first when the corpus has it
PER_NAME = 3


def linked_names(passages: Sequence[Passage], question: str) -> list[str]:
    """The names ``passages`` mention that ``question`` does not, in passage then text order, each once."""
    names: list[str] = []
    for p in passages:
        for sentence in split_sentences(p.text):  # a sentence's end also ends a name ("... Dimsdale. It")
            for name in entities_of(sentence, question, names_only=True):
                if name not in names:
                    names.append(name)
    return names


def linked_sources(retriever: Any, passages: Sequence[Passage], question: str, k: int,
                   held: set[str] | frozenset[str] = frozenset()) -> list[tuple[Passage, str | None]]:
    """At most ``k`` passages the prompt does not hold (``held``), each with where it came from: the own articles
    of the names ``passages`` mention (:func:`linked_names`), paired with that name and those sharing more of the
    question's content words first, then the question's next-ranked passages, paired with ``None``."""
    names = linked_names(passages, question)
    found: list[tuple[Passage, str | None]] = []
    for name, ranking in zip(names, fetch_rankings(retriever, names, PER_NAME, held)):
        own = next((p for p in ranking if is_article_of(p, name)), None)
        if own is not None and all(own.id != f.id for f, _ in found):
            found.append((own, name))
    asked = set(content_words(question))
    found.sort(key=lambda pair: -len(asked & set(content_words(pair[0].text))))  # stable: name order breaks ties
    for p in fetch_rankings(retriever, [question], k, held)[0]:
        if all(p.id != f.id for f, _ in found):
            found.append((p, None))
    return found[:k]


def linked_articles(retriever: Any, passages: Sequence[Passage], question: str, k: int,
                    held: set[str] | frozenset[str] = frozenset()) -> list[Passage]:
    """The passages of :func:`linked_sources`, without where they came from."""
    return [p for p, _ in linked_sources(retriever, passages, question, k, held)]


def check_follow_links(follow_links: bool, context: Any, retrieves_first: bool) -> bool:
    """``ActiveRAG(follow_links=True)``: right after the retrieval with the question, before the first token, add
    the own articles of the names its passages mention (:func:`linked_sources`). That needs a first retrieval
    (``trigger="once"`` or ``initial_retrieval=True``) and a context policy that keeps both retrievals' passages
    (``accumulate`` or ``rerank``); raises :class:`~active_rag.errors.InvalidOptionError` otherwise."""
    if not follow_links:
        return False
    if not retrieves_first:
        raise InvalidOptionError("follow_links follows the links of the passages retrieved with the question: use "
                                 "trigger='once' or initial_retrieval=True, or drop follow_links.")
    if not getattr(context, "skip_held", False):
        raise InvalidOptionError(f"follow_links adds the linked articles to the question's passages, but context "
                                 f"{context.name!r} would replace them: use context='accumulate' (or 'rerank').")
    return True
