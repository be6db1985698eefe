"""Which linked passages a lexical rule could leave out: per-link features and rules, without the model.

The linked look's item "links that earn their place" asks for half the linked passages without gold at no loss of all-gold
recall. ``dump`` writes, per question of a slice, the ``choose`` way's linked passages (:func:`active_rag.answer.
links.follow_links`, as ``research/linked_recall.py`` runs it: BM25 top 3, 3 more) with what a rule could read:

- ``order``: the look's own rank; ``qname``: the question names it;
- ``rel``: the linked passage's relevance to the question (:class:`~active_rag.retrieval.relevance.Relevance`),
  ``floor`` (per question) the least relevant first passage's;
- ``sent_rel``: the relevance of the read sentence that mentions the name (its own words left out), ``srank``: the
  rank of the read passage that mentions it;
- ``mentions``: how many of the corpus's passages mention the name (a hub: a city, a war, an award);
- ``emb``: the linked passage's cosine with the question (all-MiniLM-L6-v2, :class:`~active_rag.retrieval.
  embeddings.MiniLMEncoder`), ``emb_floor`` (per question) the least similar first passage's, ``sent_emb``: the
  mentioning sentence's cosine with the question;
- ``gold``: the passage is a gold paragraph.

``rules`` replays the look with each rule of :data:`RULES` (the kept links first, the question's next passages
fill the rest, as ``follow_links`` fills) and prints, per slice, all-gold % and linked passages without gold a
question, against the look as it is::

    python research/link_features.py dump --dataset hotpotqa --data-dir /tmp/union --out /tmp/lf/hp-union.jsonl
    python research/link_features.py rules /tmp/lf/*.jsonl --out results/linked-recall/features/rules.md

``learn`` fits a logistic model of the same features (:func:`link_vector`) on some slices' links (gold or not),
takes the highest threshold on its probability that keeps the training slices' all-gold recall, and replays that
rule on every slice: the slices it was not fitted on say whether a learned filter carries to other questions::

    python research/link_features.py learn /tmp/lf/*.jsonl --train 2wiki-union --out results/linked-recall/features/learned.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

try:  # imported as research.link_features (the tests), or run as a script beside linked_recall.py
    from research.linked_recall import CountingRetriever, hide_titles
except ModuleNotFoundError:
    from linked_recall import CountingRetriever, hide_titles  # type: ignore[no-redef]

from active_rag.answer.link_filter import FEATURES, LinkFilter, describe_links, link_vector
from active_rag.answer.links import follow_links, question_names
from active_rag.answer.options import question_options
from active_rag.answer.read_choice import choose_reading
from active_rag.evaluation.datasets import load_dataset
from active_rag.evaluation.method_engines import load_corpus_index
from active_rag.retrieval.name_index import NameIndex, name_key
from active_rag.retrieval.rankings import fetch_rankings
from active_rag.retrieval.embeddings import MiniLMEncoder

Row = dict[str, Any]
Rule = Callable[[Row, Row], bool]


def dump(dataset: str, data_dir: Path | None, split: str, hide: bool, out: Path) -> None:
    """Write one JSON line per question with gold ids: its first and next-ranked ids, its gold and its links."""
    examples = load_dataset(dataset, data_dir, None, split=split)
    index, _, _ = load_corpus_index(dataset, data_dir)
    if hide:
        index = hide_titles(index)
    names = NameIndex.from_passages(index.passages)
    retriever = CountingRetriever(index, names)
    encoder = MiniLMEncoder()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for e in (e for e in examples if e.gold_passage_ids):
            q, first = e.question, retriever.retrieve(e.question, 3)
            held = {p.id for p in first}
            compare = choose_reading(q).way == "compare"
            links = follow_links(retriever, [] if compare else first, q, 8, held, fill=False)
            own = {name_key(n) for n in question_names(q, names.names_document)}
            named = [(p, n) for p, n in links.sources if n is not None]
            row = describe_links(q, first, named, links.linked_from, own, names, encoder, bool(question_options(q)))
            gold = set(e.gold_passage_ids)
            for link in row["links"]:
                link["gold"] = link["id"] in gold
            f.write(json.dumps(dict(question=q, compare=compare, options=row["options"], floor=row["floor"],
                                    first=sorted(held), emb_floor=row["emb_floor"],
                                    ahead=[p.id for p in fetch_rankings(retriever, [q], 9, held)[0]],
                                    gold=list(e.gold_passage_ids), links=row["links"])) + "\n")


def replay(rows: Sequence[Row], keep: Rule | None = None, k: int = 3) -> tuple[float, float]:
    """All-gold % and linked passages without gold a question when the look keeps the links ``keep`` accepts."""
    held = without_gold = 0
    for q in rows:
        ids: list[str] = []
        for link in q["links"]:
            if (keep is None or keep(q, link)) and link["id"] not in ids:
                ids.append(link["id"])
        ids = ids[:k] + [a for a in q["ahead"] if a not in ids][:max(0, k - len(ids))]
        gold, ahead = set(q["gold"]), set(q["ahead"][:k])
        held += gold <= set(q["first"]) | set(ids)
        without_gold += sum(i not in ahead and i not in gold for i in ids)
    return 100.0 * held / len(rows), without_gold / len(rows)


def _first(n_open: int, n_choice: int, hub: int | None = None) -> Rule:
    def keep(q: Row, link: Row) -> bool:
        if link["qname"]:
            return True
        others = [x for x in q["links"] if not x["qname"] and (hub is None or x["mentions"] < hub)]
        return link in others and others.index(link) < (n_choice if q["options"] else n_open)
    return keep


def _share(rel: float, sent: float, first: int = 0, hub: int | None = None) -> Rule:
    def keep(q: Row, link: Row) -> bool:
        if link["qname"]:
            return True
        if hub is not None and link["mentions"] >= hub:
            return False
        floor = q["floor"] or 1.0
        return (q["links"].index(link) < first or link["rel"] >= rel * floor or link["sent_rel"] >= sent * floor)
    return keep


def _dense(first: int, above: float, hub: int | None = 20) -> Rule:
    """The look's first ``first`` links, or a link whose passage is closer to the question (MiniLM cosine) than the
    least similar first passage by ``above``."""
    def keep(q: Row, link: Row) -> bool:
        if link["qname"]:
            return True
        if hub is not None and link["mentions"] >= hub:
            return False
        return q["links"].index(link) < first or link["emb"] >= q["emb_floor"] + above
    return keep


def _dense_top(n_open: int, n_choice: int, hub: int | None = 20) -> Rule:
    """The ``n`` links whose passages are closest to the question (MiniLM cosine), not the look's first."""
    def keep(q: Row, link: Row) -> bool:
        if link["qname"]:
            return True
        others = [x for x in q["links"] if not x["qname"] and (hub is None or x["mentions"] < hub)]
        ranked = sorted(others, key=lambda x: -x["emb"])
        return link in ranked[:n_choice if q["options"] else n_open]
    return keep


#: name -> rule: the look's first links, a hub cut, shares of the question's least relevant first passage, and
#: the dense similarity of the linked passage to the question
RULES: dict[str, Rule] = {
    "hubs out (mentioned by 20+ passages)": _share(0.0, 0.0, 99, hub=20),
    "first link (open), 2 (choice)": _first(1, 2),
    "first 2 links, 3 (choice), hubs out": _first(2, 3, hub=20),
    "first 2 links or sentence >= 0.8 floor, hubs out": _share(99.0, 0.8, 2, hub=20),
    "sentence >= 0.8 floor or passage >= 0.5 floor, hubs out": _share(0.5, 0.8, 0, hub=20),
    "first link or cosine >= floor + 0.05, hubs out": _dense(1, 0.05),
    "cosine >= floor + 0.05, hubs out": _dense(0, 0.05),
    "2 closest links (open), 3 (choice), hubs out": _dense_top(2, 3),
}


def _slices(paths: Sequence[Path]) -> dict[str, list[Row]]:
    return {p.stem: [json.loads(line) for line in p.open(encoding="utf-8")] for p in paths}


def rules_table(paths: Sequence[Path]) -> str:
    slices = _slices(paths)
    base = {name: replay(rows) for name, rows in slices.items()}
    head = "| Rule | " + " | ".join(slices) + " |"
    lines = ["All-gold % (change) / linked passages without gold a question (share of the look's), BM25 top 3 then 3.",
             "", head, "|---|" + "---:|" * len(slices),
             "| the look as it is | " + " | ".join(f"{a:.1f} / {n:.2f}" for a, n in base.values()) + " |"]
    for name, rule in RULES.items():
        cells = []
        for s, rows in slices.items():
            a, n = replay(rows, rule)
            cells.append(f"{a - base[s][0]:+.1f} / {n / base[s][1] if base[s][1] else 0:.2f}x")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


class LearnedFilter:
    """Logistic regression (L2 1e-3, full-batch gradient descent on standardised features) of "the linked passage is
    gold" on :func:`~active_rag.answer.link_filter.link_vector`; :meth:`rule` keeps a link whose probability is at
    least ``threshold``; :meth:`as_filter` is the engine's :class:`~active_rag.answer.link_filter.LinkFilter`."""

    def __init__(self, rows: Sequence[Row], steps: int = 3000, rate: float = 0.5, l2: float = 1e-3) -> None:
        pairs = [(link_vector(q, x), float(x["gold"])) for q in rows for x in q["links"] if not x["qname"]]
        x = np.asarray([v for v, _ in pairs])
        y = np.asarray([g for _, g in pairs])
        self.mean, self.scale = x.mean(0), x.std(0)
        self.mean[0], self.scale[0] = 0.0, 1.0
        self.scale[self.scale == 0] = 1.0
        z = (x - self.mean) / self.scale
        self.weights = np.zeros(x.shape[1])
        for _ in range(steps):
            p = 1.0 / (1.0 + np.exp(-z @ self.weights))
            self.weights -= rate * (z.T @ (p - y) / len(y) + l2 * self.weights)

    def as_filter(self, threshold: float, fitted_on: str = "") -> LinkFilter:
        return LinkFilter(tuple(map(float, self.weights)), tuple(map(float, self.mean)), tuple(map(float, self.scale)),
                          float(threshold), fitted_on)

    def rule(self, threshold: float) -> Rule:
        scorer = self.as_filter(threshold)

        def keep(q: Row, link: Row) -> bool:
            return bool(link["qname"]) or scorer.probability(q, link) >= threshold
        return keep

    def lossless_threshold(self, rows: Sequence[Row], grid: Sequence[float] = tuple(np.arange(0.01, 0.5, 0.01))) -> float:
        """The highest threshold of ``grid`` at which the look keeps ``rows``' all-gold recall (0 when none does)."""
        base = replay(rows)[0]
        kept = [t for t in grid if replay(rows, self.rule(t))[0] >= base - 1e-9]
        return float(max(kept)) if kept else 0.0


def learned_table(paths: Sequence[Path], trains: Sequence[Sequence[str]], save: Path | None = None) -> str:
    """Per training set: the fitted filter at its lossless threshold, replayed on every slice (as :func:`rules_table`).
    ``save``: write the first training set's filter there (:meth:`~active_rag.answer.link_filter.LinkFilter.save`)."""
    slices = _slices(paths)
    base = {name: replay(rows) for name, rows in slices.items()}
    lines = ["All-gold % (change) / linked passages without gold a question (share of the look's), BM25 top 3 then 3;",
             "a logistic filter fitted on the slices named, at the highest threshold that keeps their all-gold recall.",
             "", "| Fitted on (threshold) | " + " | ".join(slices) + " |", "|---|" + "---:|" * len(slices),
             "| the look as it is | " + " | ".join(f"{a:.1f} / {n:.2f}" for a, n in base.values()) + " |"]
    notes = []
    for train in trains:
        missing = [t for t in train if t not in slices]
        if missing:
            raise SystemExit(f"--train names {', '.join(missing)}, not among the dumps ({', '.join(slices)})")
        rows = [q for t in train for q in slices[t]]
        learned = LearnedFilter(rows)
        threshold = learned.lossless_threshold(rows)
        if save is not None and train is trains[0]:
            learned.as_filter(threshold, f"{' + '.join(train)} (research/link_features.py learn)").save(save)
        cells = []
        for s, srows in slices.items():
            a, n = replay(srows, learned.rule(threshold))
            mark = "" if s in train else "*"
            cells.append(f"{a - base[s][0]:+.1f} / {n / base[s][1] if base[s][1] else 0:.2f}x{mark}")
        lines.append(f"| {' + '.join(train)} ({threshold:.2f}) | " + " | ".join(cells) + " |")
        order = np.argsort(-np.abs(learned.weights[1:])) + 1
        notes.append(f"- {' + '.join(train)}: " + ", ".join(f"{FEATURES[i]} {learned.weights[i]:+.2f}" for i in order[:5]))
    return "\n".join(lines + ["", "\\* a slice the filter was not fitted on. Largest standardised weights:", ""] + notes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python research/link_features.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="write a slice's per-link features as JSONL")
    d.add_argument("--dataset", required=True, choices=("hotpotqa", "2wikimultihopqa", "strategyqa", "pydocs"))
    d.add_argument("--data-dir", type=Path, default=None)
    d.add_argument("--split", default="dev")
    d.add_argument("--hide-titles", action="store_true")
    d.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("rules", help="replay the rules on dumped slices")
    r.add_argument("dumps", type=Path, nargs="+")
    r.add_argument("--out", type=Path, default=None)
    learn = sub.add_parser("learn", help="fit a filter on some slices, replay it on all")
    learn.add_argument("dumps", type=Path, nargs="+")
    learn.add_argument("--train", action="append", required=True,
                       help="comma-separated slice names (file stems) to fit on; repeat for more rows")
    learn.add_argument("--out", type=Path, default=None)
    learn.add_argument("--save", type=Path, default=None,
                       help="write the first --train's filter as JSON (the engine's: active_rag/data/link_filter.json)")
    args = parser.parse_args(argv)
    if args.command == "dump":
        dump(args.dataset, args.data_dir, args.split, args.hide_titles, args.out)
        return 0
    if args.command == "learn":
        text = learned_table(args.dumps, [t.split(",") for t in args.train], args.save)
    else:
        text = rules_table(args.dumps)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
