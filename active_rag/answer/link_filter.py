"""Read a linked passage only when it bears on the question: a learned filter of a linked look's links (beyond the
papers).

A linked look (:func:`active_rag.answer.links.follow_links`) adds the own passages of the names the question's
passages mention. Many of them are not the bridge the question needs: a city, an award, a war that the passage
names in passing. The filter scores each followed name that the question does not name itself with a logistic
model of what a look knows about it without the model (:data:`FEATURES`, :func:`link_vector`):

- its rank among the look's links, and how many links the look found;
- its passage's relevance to the question and that of the read sentence that mentions the name (the name's own
  words left out), each as a share of the least relevant first passage's (:mod:`active_rag.retrieval.relevance`);
- how many of the corpus's passages mention the name (:meth:`~active_rag.retrieval.name_index.NameIndex.mentions`);
- the passage's and the mentioning sentence's cosine with the question under all-MiniLM-L6-v2
  (:class:`~active_rag.retrieval.embeddings.MiniLMEncoder`), the passage's against the least similar first
  passage's; the rank of the read passage that mentions it; whether the question offers options.

A link whose probability of being a gold passage is below the filter's ``threshold`` is not read; the question's
next passages fill its place, as they fill what any look leaves. The question's own names are always read.

The shipped weights (``active_rag/data/link_filter.json``) were fitted by ``research/link_features.py learn
--save`` on the links of 2WikiMultihopQA dev over the union corpus, and cut at the highest threshold that keeps
that slice's all-gold recall. Replayed without the model on the slices it was not fitted on (BM25 top 3, then 3):
HotpotQA dev over the union keeps 0.49x of its linked passages without gold at +0.7 points of all-gold recall,
dev-b 0.57x (+0.8), hidden titles 0.41x (+2.7), pydocs 0.43x (-0.5) (``results/linked-recall/features/``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import InvalidOptionError
from ..retrieval.name_index import name_key
from ..retrieval.relevance import relevance_of, terms
from ..text import split_sentences
from ..types import Passage

__all__ = ["FEATURES", "LinkFilter", "default_link_filter", "describe_links", "link_vector"]

#: The shipped filter's file.
DEFAULT_PATH = Path(__file__).parents[1] / "data" / "link_filter.json"

FEATURES = ("bias", "first link", "second link", "third or later", "passage relevance / floor",
            "sentence relevance / floor", "log(1 + mentions)", "hub (20+ mentions)", "cosine - first passages' floor",
            "sentence cosine", "mentioning passage's rank", "choice question", "links a question")
"""The names of :func:`link_vector`'s entries, in order."""

Row = Mapping[str, Any]


class Encoder(Protocol):
    def encode(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


def link_vector(q: Row, link: Row) -> list[float]:
    """A link's features (:data:`FEATURES`) from the question's row ``q`` (``floor``, ``emb_floor``, ``options``,
    ``links``) and the link's (``rel``, ``sent_rel``, ``mentions``, ``emb``, ``sent_emb``, ``srank``, ``qname``). A
    link the question names is always read, so it has none."""
    floor = q["floor"] or 1.0
    others = [x for x in q["links"] if not x["qname"]]
    k = others.index(link)
    return [1.0, float(k == 0), float(k == 1), float(k >= 2), link["rel"] / floor, link["sent_rel"] / floor,
            math.log1p(link["mentions"]), float(link["mentions"] >= 20), link["emb"] - q["emb_floor"],
            link["sent_emb"], float(link["srank"]), float(q["options"]), float(len(others))]


def _cosines(encoder: Encoder, texts: Sequence[str]) -> list[float]:
    """Each of ``texts[1:]``'s cosine with ``texts[0]`` (the encoder's vectors are normalised)."""
    vectors = encoder.encode(list(texts))
    first = vectors[0]
    return [float(sum(a * b for a, b in zip(v, first))) for v in vectors[1:]]


def describe_links(question: str, passages: Sequence[Passage], sources: Sequence[tuple[Passage, str]],
                   linked_from: Mapping[str, str | None], question_name_keys: set[str], index: Any,
                   encoder: Encoder, options: bool) -> dict[str, Any]:
    """The question's row for :func:`link_vector`: ``floor`` and ``emb_floor`` (the least relevant and least
    similar of ``passages``, the first ones read), ``options``, and ``links``, one row per followed name of
    ``sources`` (in the look's order) with ``name``, ``id``, ``order``, ``qname`` (the question names it: its key is
    in ``question_name_keys``) and the features the module's docstring lists."""
    relevance, asked = relevance_of(index), terms(question)

    def weight(w: str) -> float:
        return relevance.weights.get(w, relevance._unseen)

    links: list[dict[str, Any]] = []
    texts = [question] + [f"{p.title}\n{p.text}" for p in passages]
    for order, (p, name) in enumerate(sources):
        source = linked_from.get(p.id)
        srank = next((i for i, fp in enumerate(passages) if fp.id == source), -1)
        sentence = next((s for s in split_sentences(passages[srank].text) if name in s), "") if srank >= 0 else ""
        links.append(dict(order=order, name=name, id=p.id, qname=name_key(name) in question_name_keys,
                          rel=relevance.score(asked, p), srank=srank, mentions=index.mentions(name),
                          sent_rel=sum(weight(w) for w in asked & (terms(sentence) - terms(name)))))
        texts += [f"{p.title}\n{p.text}", sentence or p.title]
    cos = _cosines(encoder, texts) if any(not x["qname"] for x in links) else []  # nothing to score: no encoding
    for i, row in enumerate(links):
        row["emb"] = cos[len(passages) + 2 * i] if cos else 0.0
        row["sent_emb"] = cos[len(passages) + 1 + 2 * i] if cos else 0.0
    return dict(floor=min((relevance.score(asked, p) for p in passages), default=0.0),
                emb_floor=min(cos[:len(passages)], default=0.0), options=options, links=links)


@dataclass
class LinkFilter:
    """A logistic model of "this link's passage is gold" on :func:`link_vector` (standardised by ``mean`` and
    ``scale``); a link is read when its probability is at least ``threshold``. ``fitted_on`` says on what."""

    weights: tuple[float, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    threshold: float
    fitted_on: str = ""
    _encoder: Encoder | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(FEATURES)
        if not (len(self.weights) == len(self.mean) == len(self.scale) == n):
            raise InvalidOptionError(f"A link filter needs {n} weights, means and scales (one per feature of "
                                     f"link_filter.FEATURES); got {len(self.weights)}, {len(self.mean)}, {len(self.scale)}.")
        if not 0.0 <= self.threshold <= 1.0:
            raise InvalidOptionError(f"A link filter's threshold is a probability in [0, 1]; got {self.threshold}.")

    def probability(self, q: Row, link: Row) -> float:
        z = sum(w * (x - m) / s for w, x, m, s in zip(self.weights, link_vector(q, link), self.mean, self.scale))
        return 1.0 / (1.0 + math.exp(-z))

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            from ..retrieval.embeddings import MiniLMEncoder  # loads transformers: only when a filter scores

            self._encoder = MiniLMEncoder(show_progress=False)
        return self._encoder

    def scores(self, q: Row) -> dict[str, float]:
        """Name -> probability for each link of ``q`` (:func:`describe_links`) that the question does not name."""
        return {x["name"]: self.probability(q, x) for x in q["links"] if not x["qname"]}

    def to_json(self) -> dict[str, Any]:
        return dict(features=list(FEATURES), weights=list(self.weights), mean=list(self.mean),
                    scale=list(self.scale), threshold=self.threshold, fitted_on=self.fitted_on)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path = DEFAULT_PATH) -> LinkFilter:
        """A filter saved by :meth:`save`; its features must be :data:`FEATURES`, in order."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if tuple(data.get("features", ())) != FEATURES:
            raise InvalidOptionError(f"{path} holds a link filter of other features than link_filter.FEATURES: "
                                     "fit it again with research/link_features.py learn --save.")
        return cls(tuple(data["weights"]), tuple(data["mean"]), tuple(data["scale"]), float(data["threshold"]),
                   str(data.get("fitted_on", "")))


_DEFAULT: list[LinkFilter] = []


def default_link_filter() -> LinkFilter:
    """The shipped filter (:data:`DEFAULT_PATH`), loaded once a process."""
    if not _DEFAULT:
        _DEFAULT.append(LinkFilter.load())
    return _DEFAULT[0]
