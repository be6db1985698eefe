"""Follow the links of the passages the model read (beyond the papers).

A multi-hop question names its first hop; the passage about the first hop names the bridge, and the bridge's own
article holds the answer. In Wikipedia the passage links to that article: "Kiss and Tell is a 1945 American comedy
film starring then 17-year-old Shirley Temple" leads to the article titled "Shirley Temple", where her government
post is. The question's words rank the bridge's article low (it shares one name with the question, if any), so
retrieving the question's next passages rarely finds it; the name in the passage does.

:func:`follow_links` is the second look's query ``"linked"`` (:class:`~active_rag.answer.check.AnswerCheck`) and
``ActiveRAG(answer=AnswerStage(links=True))`` (the ``sr-rag-linked`` preset):

1. the names the prompt's passages mention (:func:`mentioned_names`): capitalised phrases that the question does
   not name, without a word that is only capitalised because it opens a sentence ("Despite", "Overall") and
   without the names of the passages the prompt holds (their titles, or the names their texts open with);
2. each name's own passages, looked up in the retriever's name index (:mod:`active_rag.retrieval.name_index`: a passage is
   about a name when its title is the name, or when its text opens with it, so a corpus of files titled
   ``products.md`` has links too) without asking the retriever. With the index the question's own names
   (:func:`question_names`) are looked up too: an article of theirs that the first retrieval missed (the second
   person of "Who is older, Annie Morton or Terry Richardson?") costs nothing. A retriever without an index
   (:func:`~active_rag.retrieval.name_index.name_index_of`) is asked once per name instead, for at most :data:`MAX_NAMES`
   names, with a warning;
3. the names worth following, at most :data:`MAX_NAMES`: those with a passage the prompt does not hold and, for a
   name the passages mention, one that bears on the question (:mod:`active_rag.retrieval.relevance`: it shares
   enough of the question's weighted words, compared with the question's own passages), ranked by how many of the
   question's content words that passage shares, then by where the name is first mentioned;
4. on a corpus of chunked documents (a folder, a text splitter's chunks: ``metadata["source"]``), a name the
   passages mention is followed only when its passage bears on the question at least as much as the question's
   next-ranked chunk of a document it already reads (``continuation``): "Who is the author of the joblib
   package?" reads joblib's next chunk, not NumPy's page that joblib's first chunk mentions. So is a name that only
   the question's premise states (:func:`premise_names`), scored without its own name: "requests depends on a
   package described as "...". Who is the author of that package?" asks about the package described, and the
   page of requests (its author) is read only when the rest of the question bears on it more than on the next
   chunk of the described package's page. A passage the reading mentions is scored without the names of the
   documents the question names and reads (``subject``): celery's header lists billiard among its requirements,
   which is no reason to read it for "Who is the author of the billiard package?". A Wikipedia-shaped corpus (one
   passage per article) has nothing to continue and is followed as before;
5. the best passage of each followed name (of a name's chunks, the one sharing most of the question's words),
   then the question's next-ranked passages fill what is left of ``k`` (one retriever call, only when needed; the
   same ranking as step 4's when it was asked for).

So a linked look costs at most one retriever call, not one per name. Evidence recall with BM25 top-3 as the
first retrieval and 3 passages added, without the model (``python research/linked_recall.py``,
``results/linked-recall/``): HotpotQA 150 dev questions 80.0% of prompts hold every gold paragraph (the look
that asked once per name: 76.0%, 24.1 retriever calls a question), 72.0% with the titles hidden (48.0%);
2WikiMultihopQA 83.3% (82.0%), 70.0% hidden (30.0%); 1.6 retriever calls a question, at most 2. On pydocs (212
questions over a folder of 258 package pages, 3,975 chunks; ``results/linked-recall/pydocs*.md``) step 4 takes the
linked passages without gold from 1.38 to 0.43 a question and every gold passage held from 84.9% to 87.3%
(``choose``; 2 retriever calls a question), and leaves the Wikipedia unions' figures as they were; with a premise's
names facing it too, 0.41 and 83.5% (the pydocs gold counts the header of the package a two-hop question names,
which the reader does not need once the described package's page is read); with ``subject``, 0.33 and 83.5%
(``results/linked-recall/pydocs-subject.md``; chosen there, then replayed on the second folder of 194 packages,
``results/eval-heldout/pydocs-fresh/linked-recall-subject.md``: 0.32 -> 0.25 and 78.6% -> 79.3%).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..entities import capitalised_phrases, content_words, is_article_of
from ..errors import InvalidOptionError
from ..retrieval.name_index import (NameIndex, is_file_name, name_index_of, name_key, opens_sentence, source_of,
                                    text_subjects)
from ..retrieval.rankings import fetch_rankings
from ..retrieval.relevance import MIN_SHARE, relevance_of, terms
from ..markup import identifiers, prose
from .link_filter import LinkFilter, describe_links
from .options import question_options
from ..text import AUXILIARIES, WH_WORDS, split_sentences, stop_words
from ..types import Passage

__all__ = [
    "Links",
    "MAX_NAMES",
    "asking_sentence",
    "check_follow_links",
    "follow_links",
    "linked_articles",
    "linked_names",
    "linked_sources",
    "mentioned_names",
    "premise_names",
    "question_articles",
    "question_names",
]

#: the names a linked look follows at most: the best-ranked ones
MAX_NAMES = 8
#: passages asked for per name from a retriever without a name index: the name's own article is almost always first
PER_NAME = 3
#: ``follow_links(hub=...)``: a name fewer passages than this mention is never a hub, whatever the corpus's size
HUB_MIN_MENTIONS = 20

_LOWER = re.compile(r"(?<![\w'’-])[a-z]+(?![\w'’-])")
#: A word of a question that may name a document: lowercase, possibly an identifier ("typing-extensions", "pyyaml").
_QUESTION_WORD = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*")
#: a quotation in double quotes, straight or curly (group 1 or 2: its text)
QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”')
_WORD = re.compile(r"[A-Za-z]+")
#: the words a question's asking sentence opens with
_ASKS = WH_WORDS | AUXILIARIES
_MONTHS = frozenset("january february march april may june july august september october november december".split())


@dataclass
class Links:
    """What a linked look found: the names it followed, best first (at most :data:`MAX_NAMES`), the passages it adds
    each with the name it is the article of (``None``: the question's next passage), and the retriever calls it
    made."""

    names: list[str] = field(default_factory=list)
    sources: list[tuple[Passage, str | None]] = field(default_factory=list)
    retriever_calls: int = 0
    linked_from: dict[str, str | None] = field(default_factory=dict)
    """Article id -> the id of the read passage that first mentions its name (``None``: the question names it)."""
    unrelated: list[str] = field(default_factory=list)
    """Names the passages mention whose own passage does not bear on the question: not followed."""
    outranked: list[str] = field(default_factory=list)
    """Names the passages mention whose own passage bears on the question less than the next chunk of a document
    the question already reads (:func:`follow_links`' ``continuation``): that chunk is read instead."""
    hubs: list[str] = field(default_factory=list)
    """Names the passages mention that too many of the corpus's passages mention (:func:`follow_links`' ``hub``)."""
    scores: dict[str, float] = field(default_factory=dict)
    """Name -> the link filter's probability that its passage is gold (:func:`follow_links`' ``link_filter``), for
    each followed name the question does not name."""
    filtered: list[str] = field(default_factory=list)
    """Names whose probability is below the link filter's threshold: their passages are not read."""

    @property
    def passages(self) -> list[Passage]:
        return [p for p, _ in self.sources]

    @property
    def articles(self) -> dict[str, str]:
        """Passage id -> the name whose article it is (the question's next passages are left out)."""
        return {p.id: name for p, name in self.sources if name is not None}


def _is_first(sentence: str, start: int) -> bool:
    """Whether the phrase at ``start`` is the first word of ``sentence`` (after quotes or a parenthesis)."""
    return not sentence[:start].strip(" \t\"'“‘(#*>•-")


def mentioned_names(passages: Sequence[Passage], question: str,
                    known: Callable[[str], bool] | None = None) -> list[str]:
    """The names ``passages`` mention that ``question`` does not, in passage then text order, each once: capitalised
    phrases (:func:`~active_rag.entities.capitalised_phrases`) of words the question lacks, no numbers, dates or
    one-letter words, and no word capitalised only because it opens a sentence
    (:func:`~active_rag.retrieval.name_index.opens_sentence`: "Despite", "Overall", "Furthermore", or alone a stop word or a
    word the passages also write in lower case): "Despite the run ..." names nothing, "Despite Smith's run ..."
    names Smith. Only the prose counts (:func:`~active_rag.markup.prose`): not a field's key ("Author-email:"), a
    heading, a badge, a link's text or a URL. With ``known`` (does the corpus have a document of this name?), the
    lowercase identifiers a documentation folder names its documents by count too (:func:`~active_rag.markup.identifiers`:
    ``jupyter-core``, ``pyyaml`` in a ``Requires-Dist:`` line or in backticks)."""
    asked = set(content_words(question))
    lower_words = {w for p in passages for w in _LOWER.findall(p.text)}
    found: list[str] = []
    keys: set[str] = set()
    for p in passages:
        prefix = p.metadata.get("prefix")  # a chunk's line naming its document (retrieval.chunking): not its text's
        body = p.text[len(prefix):] if isinstance(prefix, str) and prefix and p.text.startswith(prefix) else p.text
        text = prose(body)
        if known is not None:
            for name in identifiers(body):
                key = name_key(name)
                if key not in keys and not all(w in asked for w in content_words(name)) and known(name):
                    keys.add(key)
                    found.append(name)
        for sentence in split_sentences(text):  # a sentence's end also ends a name ("... Dimsdale. It")
            for phrase, start in capitalised_phrases(sentence):
                parts = phrase.strip(" .,'").split()
                if parts and _is_first(sentence, start) and opens_sentence(parts[0], len(parts) == 1, lower_words):
                    parts = parts[1:]  # the sentence's first word, not a name's
                name = " ".join(parts).strip(" .,'")
                if name.endswith("'s"):
                    name = name[:-2]
                words = content_words(name)
                if not words or all(w in asked for w in words):
                    continue
                if all(w.isdigit() or w in _MONTHS for w in words) or max(map(len, words)) < 2:
                    continue
                key = name_key(name)
                if key not in keys:
                    keys.add(key)
                    found.append(name)
    return found


def question_names(question: str, known: Callable[[str], bool] | None = None) -> list[str]:
    """The names ``question`` itself mentions ("Who is older, Annie Morton or Terry Richardson?": Annie Morton,
    Terry Richardson), by the rules of :func:`mentioned_names`; with ``known``, also each lowercase word or
    identifier that names a document of the corpus ("Who is the author of tenacity?")."""
    found = mentioned_names([Passage(id="question", text=question)], "")
    if known is not None:
        keys = {name_key(n) for n in found}
        for word in _QUESTION_WORD.findall(question):
            word = word.rstrip(".")
            if name_key(word) not in keys and word.lower() not in stop_words() and known(word):
                keys.add(name_key(word))
                found.append(word)
    return found


def asking_sentence(question: str) -> str | None:
    """The sentence of ``question`` that asks, when a premise comes before it ("requests depends on a package
    described as "...". Who is the author of that package?"): its last sentence that ends with "?" and opens with
    a question word ("Who", "What", "Is"); ``None`` for a question of one sentence.

    >>> asking_sentence('requests depends on a package described as "Universal encoding detector". Who wrote it?')
    'Who wrote it?'
    >>> asking_sentence("Which filmmaker was known for animation, Lev Yilmaz or Pamela B. Green?") is None
    True
    """
    sentences = split_sentences(question)
    asking = [s for s in sentences if s.rstrip().endswith("?")]
    if len(sentences) < 2 or not asking:
        return None
    words = _WORD.findall(asking[-1])
    if not words or words[0].lower() not in _ASKS:  # "Green?" ends a name with an initial, not a question
        return None
    return asking[-1]


def premise_names(question: str, names: Sequence[str]) -> list[str]:
    """Of ``names`` (the question's own, :func:`question_names`), those only its premise states: a question that says
    something and then asks may point with a name of its statement at what it asks about ("requests depends on a
    package described as "...". Who is the author of that package?" asks about the package described, not about
    requests). A name the asking sentence (:func:`asking_sentence`) or a quotation of the question holds (a
    description, a title) is not the premise's; a question of one sentence has no premise.

    >>> premise_names('requests depends on a package described as "Universal encoding detector". Who wrote it?',
    ...               ["requests", "Universal"])
    ['requests']
    >>> premise_names("Who is the author of the weasel package?", ["weasel"])
    []
    """
    asking = asking_sentence(question)
    if asking is None:
        return []
    quoted = " ".join(a or b for a, b in QUOTED.findall(question)).lower()
    return [n for n in names if n.lower() not in asking.lower() and n.lower() not in quoted]


def _own_names(passages: Sequence[Passage]) -> set[str]:
    """The name keys of what ``passages`` are about: their titles (a file name is not one) and the names their texts
    open with (:func:`~active_rag.retrieval.name_index.text_subjects`): names the prompt already holds."""
    keys = {name_key(p.title) for p in passages if p.title and not is_file_name(p.title)}
    return keys | {name_key(s) for p in passages for s in text_subjects(p.text)}


def _overlap(asked: set[str], passage: Passage) -> int:
    return len(asked & set(content_words(passage.text)))


def _warn_no_index(retriever: Any) -> None:
    """Say that ``retriever`` is asked once per name (Python shows a warning once per place by default)."""
    kind = type(getattr(retriever, "retriever", retriever)).__name__  # an adapter's: the retriever it wraps
    warnings.warn(
        f"follow_links: the retriever {kind} has no name index, so each name its passages mention is asked of it "
        f"alone (at most {MAX_NAMES} calls a look). Give it one with active_rag.retrieval.name_index.attach_name_index("
        "retriever, passages) (BM25Index and the LangChain and LlamaIndex retrievers over held documents have one).",
        stacklevel=3,
    )


def follow_links(retriever: Any, passages: Sequence[Passage], question: str, k: int,
                 held: set[str] | frozenset[str] = frozenset(), *, with_question_names: bool = True,
                 fill: bool = True, min_share: float = MIN_SHARE, continuation: bool = True, hub: float = 0.0,
                 link_filter: LinkFilter | None = None, subject: bool = True) -> Links:
    """At most ``k`` passages the prompt does not hold (``held``): the own passages of the names worth following
    that ``passages`` mention (and, with a name index and ``with_question_names``, that the question mentions),
    then the question's next-ranked ones (see the module's docstring). ``fill=False``: the question's next passages
    only when no name's article was found (then no retriever call when one was).

    ``continuation`` (with a name index): when ``passages`` are chunks of documents (``metadata["source"]``, as a
    folder's or a text splitter's chunks are) and the question's next-ranked passages continue one of them, a name
    the passages mention is followed only when its passage bears on the question (:class:`~active_rag.retrieval.
    relevance.Relevance`) at least as much as the least relevant of those continuing chunks: a link displaces the
    next chunk of the document the question reads only when it earns that place. A name only the question's premise
    states (:func:`premise_names`) faces that rule too, its passage scored against the question without the name.
    The next-ranked passages are
    asked for once, and the same ranking fills what the links leave. A corpus of one passage per article
    (Wikipedia) has no chunks to continue and is followed as before.

    ``hub`` (with a name index; 0, the default, follows every name): a name the passages mention is not followed when
    at least that share of the corpus's passages, and at least :data:`HUB_MIN_MENTIONS`, mention it
    (:meth:`~active_rag.retrieval.name_index.NameIndex.mentions`): a city, a war, an award, which many passages
    name in passing, is rarely the bridge a question needs (measured, not the default: docs/context.md).

    ``subject`` (with ``continuation``): a name the passages mention is scored against the question without the
    names of the documents the question names and the prompt already reads: a page that merely names the subject
    (a requirement, a "see also") does not displace the subject's own next chunk.

    ``link_filter`` (with a name index; ``None``, the default, reads every name followed): a name the passages mention
    is read only when the filter's probability that its passage is gold reaches its threshold
    (:mod:`active_rag.answer.link_filter`); the question's names are always read. ``links.scores`` holds each
    probability and ``links.filtered`` the names left out."""
    links = Links()
    if k < 1:
        return links
    ahead: list[Passage] | None = None
    index = name_index_of(retriever) if continuation else None
    if index is not None and _chunk_sources(index, passages):
        links.retriever_calls += 1
        ahead = fetch_rankings(retriever, [question], k, held)[0]
    for name, best in _followed(retriever, passages, question, held, with_question_names, links, min_share, ahead, hub,
                                subject):
        links.names.append(name)
        if all(best.id != f.id for f, _ in links.sources):
            links.sources.append((best, name))
            links.linked_from[best.id] = _source_of(name, passages)
    if link_filter is not None and index is not None and links.sources:
        _filter(links, link_filter, question, passages, index)
    links.sources = links.sources[:k]
    links.linked_from = {p.id: links.linked_from[p.id] for p, _ in links.sources}
    if len(links.sources) < k and (fill or not links.sources):
        if ahead is None:
            links.retriever_calls += 1
            ahead = fetch_rankings(retriever, [question], k, held)[0]
        for p in ahead:
            if all(p.id != f.id for f, _ in links.sources):
                links.sources.append((p, None))
    links.sources = links.sources[:k]
    return links


def _filter(links: Links, link_filter: LinkFilter, question: str, passages: Sequence[Passage], index: NameIndex) -> None:
    """Leave out of ``links.sources`` the names the question does not name whose passage ``link_filter`` scores below
    its threshold (:func:`follow_links`' ``link_filter``)."""
    keys = {name_key(n) for n in question_names(question, index.names_document)}
    named = [(p, name) for p, name in links.sources if name is not None]
    q = describe_links(question, passages, named, links.linked_from, keys, index, link_filter.encoder,
                       bool(question_options(question)))
    links.scores = link_filter.scores(q)
    links.filtered = [n for n, s in links.scores.items() if s < link_filter.threshold]
    links.sources = [(p, name) for p, name in links.sources if name not in links.filtered]


def _chunk_sources(index: NameIndex, passages: Sequence[Passage]) -> set[str]:
    """The documents ``passages`` were cut from (``metadata["source"]`` and the like,
    :func:`~active_rag.retrieval.name_index.source_of`) that the name index holds more than one chunk of."""
    chunked = index.chunked_sources()
    return {s for p in passages if (s := source_of(p)) is not None and s in chunked}


def _continuation_floor(index: NameIndex, question: str, passages: Sequence[Passage],
                        ahead: Sequence[Passage] | None) -> float | None:
    """The relevance to ``question`` of the least relevant of the ``ahead`` passages that continue a document
    ``passages`` were cut from (``None``: none does)."""
    reading = _chunk_sources(index, passages)
    continuing = [p for p in ahead or () if source_of(p) in reading]
    if not continuing:
        return None
    relevance, asked = relevance_of(index), terms(question)
    return min(relevance.score(asked, p) for p in continuing)


def _source_of(name: str, passages: Sequence[Passage]) -> str | None:
    """The id of the first of ``passages`` that mentions ``name`` (``None``: none does, the question names it)."""
    return next((p.id for p in passages if name in p.text or name in p.title), None)


def _followed(retriever: Any, passages: Sequence[Passage], question: str, held: set[str] | frozenset[str],
              with_question_names: bool, links: Links, min_share: float = MIN_SHARE,
              ahead: Sequence[Passage] | None = None, hub: float = 0.0,
              subject: bool = True) -> list[tuple[str, Passage]]:
    """The names worth following, best first (at most :data:`MAX_NAMES`), each with its best passage; the calls a
    retriever without a name index gets are counted in ``links``. With a name index, a name the passages mention is
    followed only when its passage bears on the question (:class:`~active_rag.retrieval.relevance.Relevance`: at
    least ``min_share`` of the score of the least relevant of ``passages``; 0 follows every one); the others are
    listed in ``links.unrelated``; with ``ahead`` (the question's next-ranked passages), one whose passage bears on
    the question less than the next chunk of a document the question reads is listed in ``links.outranked``, and
    so is a name only the question's premise states whose passage bears less on the rest of the question."""
    asked = set(content_words(question))
    index = name_index_of(retriever)
    held_ids = set(held) | {p.id for p in passages}
    own = _own_names(passages)
    known = index.names_document if index is not None else None
    candidates = [n for n in mentioned_names(passages, question, known) if name_key(n) not in own]
    asked_names: list[str] = []
    named = question_names(question, known) if index is not None else []  # the question's own names
    premise: set[str] = set()  # the question names that only its premise states (premise_names)
    if index is None:
        _warn_no_index(retriever)
        candidates = candidates[:MAX_NAMES]
        rankings = fetch_rankings(retriever, candidates, PER_NAME, held)
        links.retriever_calls += len(candidates)
        found = {n: _articles_in(r, n) for n, r in zip(candidates, rankings)}
    else:  # the question's own names first: an article of theirs the first retrieval missed costs nothing here
        asked_names = [n for n in named if name_key(n) not in own] if with_question_names else []
        candidates = asked_names + [n for n in candidates if n not in asked_names]
        premise = set(premise_names(question, asked_names))
        found = {n: index.articles(n) for n in candidates}
    relevance = relevance_of(index) if index is not None and min_share > 0 else None
    floor = _continuation_floor(index, question, passages, ahead) if index is not None else None
    asked_terms = terms(question) if floor is not None else set()
    # ``subject``: a passage the reading mentions is scored without the names of the documents the question names and
    # already reads: naming the subject ("billiard" in celery's Requires-Dist) is not bearing on what is asked of it
    read_terms = {t for n in named if name_key(n) in own for t in terms(n)} if subject and floor is not None else set()
    hub_mentions = max(HUB_MIN_MENTIONS, hub * len(index.passages)) if index is not None and hub > 0 else None
    ranked: list[tuple[int, int, str, Passage]] = []
    for order, name in enumerate(candidates):
        articles = found[name]
        if not articles or any(a.id in held_ids for a in articles):  # nothing to read, or the prompt holds it
            continue
        best = max(articles, key=lambda a: _overlap(asked, a))  # max keeps the first of equals: corpus order
        if hub_mentions is not None and name not in asked_names and index.mentions(name) >= hub_mentions:
            links.hubs.append(name)  # many passages name it in passing: rarely the bridge
            continue
        if relevance is not None and name not in asked_names and not relevance.bears_on(question, best, passages, min_share):
            links.unrelated.append(name)  # a name the passages mention whose passage does not bear on the question
            continue
        if floor is not None and (name not in asked_names or name in premise):
            scored = asked_terms - terms(name) if name in premise else asked_terms  # its own name is not what is asked
            if name not in asked_names:
                scored = scored - read_terms
            if relevance_of(index).score(scored, best) < floor:
                links.outranked.append(name)  # the next chunk of a document the question reads bears on it more
                continue
        ranked.append((-_overlap(asked, best), order, name, best))
    ranked.sort(key=lambda r: r[:2])
    return [(name, best) for *_, name, best in ranked[:MAX_NAMES]]


def question_articles(retriever: Any, question: str, held: set[str] | frozenset[str]) -> dict[str, str]:
    """The own articles of the names ``question`` mentions that the prompt does not hold (``held``), from the
    retriever's name index (passage id -> name; no retriever call): what a comparison's look reads before the
    question's next passages (:func:`~active_rag.answer.read_choice.choose_reading`). Empty when the prompt holds
    every one, when none resolves, and without a name index."""
    if name_index_of(retriever) is None:
        return {}
    return {best.id: name for name, best in _followed(retriever, [], question, held, True, Links())}


def _articles_in(ranking: Sequence[Passage], name: str) -> list[Passage]:
    """The passages of ``ranking`` about ``name``: titled with it (:func:`~active_rag.entities.is_article_of`), or
    opening with it (:mod:`active_rag.retrieval.name_index`); the first only, as its retriever ranked them."""
    titled = [p for p in ranking if p.title and not is_file_name(p.title) and is_article_of(p, name)]
    if titled:
        return titled[:1]
    return NameIndex.from_passages(ranking).articles(name)[:1]


def linked_names(passages: Sequence[Passage], question: str, retriever: Any = None,
                 held: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The names a linked look follows (:func:`follow_links`), best first; without a ``retriever`` (no index to
    rank them by) the first :data:`MAX_NAMES` of :func:`mentioned_names` that are not the passages' own."""
    if retriever is None:
        own = _own_names(passages)
        return [n for n in mentioned_names(passages, question) if name_key(n) not in own][:MAX_NAMES]
    return [name for name, _ in _followed(retriever, passages, question, held, True, Links())]


def linked_sources(retriever: Any, passages: Sequence[Passage], question: str, k: int,
                   held: set[str] | frozenset[str] = frozenset()) -> list[tuple[Passage, str | None]]:
    """The passages of :func:`follow_links`, each with the name whose article it is (``None``: the question's)."""
    return follow_links(retriever, passages, question, k, held).sources


def linked_articles(retriever: Any, passages: Sequence[Passage], question: str, k: int,
                    held: set[str] | frozenset[str] = frozenset()) -> list[Passage]:
    """The passages of :func:`follow_links`, without where they came from."""
    return follow_links(retriever, passages, question, k, held).passages


def check_follow_links(follow_links: bool | str, context: Any, retrieves_first: bool) -> bool | str:
    """``ActiveRAG(answer=AnswerStage(links=True))`` (``follow_links=True`` as a preset override): right after the
    retrieval with the question, before the first token, add the own articles of the names its passages mention
    (:func:`linked_sources`); ``"choose"``: first choose by the question's form whether to follow those links or only
    the question's own names (:func:`active_rag.answer.read_choice.choose_reading`). That needs a first retrieval
    (``trigger="once"`` or ``RunSettings(initial_retrieval=True)``) and a context policy that keeps both retrievals' passages (``accumulate`` or
    ``rerank``); raises :class:`~active_rag.errors.InvalidOptionError` otherwise."""
    if follow_links not in (True, False, "choose"):
        raise InvalidOptionError(
            f"AnswerStage(links={follow_links!r}) (follow_links) is not one of True, False or 'choose'.")
    if not follow_links:
        return False
    if not retrieves_first:
        raise InvalidOptionError("AnswerStage(links=...) (follow_links) follows the links of the passages retrieved with "
                                 "the question: use trigger='once' or RunSettings(initial_retrieval=True), or drop the links.")
    if not getattr(context, "skip_held", False):
        raise InvalidOptionError(f"AnswerStage(links=...) (follow_links) adds the linked articles to the question's "
                                 f"passages, but context {context.name!r} would replace them: use context='accumulate' (or 'rerank').")
    return follow_links
