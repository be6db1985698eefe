"""Evidence recall of a second retrieval, without the model (issue 28, ``look-again-linked``).

After a first retrieval with the question (BM25, ``--top-k`` passages), what share of questions would have every
gold passage in the prompt once ``--more`` passages are added, by each way of choosing them:

- ``question``: the question's next-ranked passages (SR-RAG with ``top-k + more`` passages);
- ``linked``: the own articles of the names the first passages mention (:func:`active_rag.linked.linked_articles`,
  the second look of ``look-again-linked``), then the question's next passages.

It also prints the new-evidence rate (the share of questions whose added passages bring a gold passage the first
ones lacked), how many of the added passages are linked articles that the question's next-ranked ones do not
include, and how many of those hold no gold passage (the noise a reader has to skip)::

    python -m active_rag.evaluation.linked_recall --dataset hotpotqa --limit 150
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from active_rag.errors import ActiveRAGError
from active_rag.evaluation.datasets import Example, load_dataset
from active_rag.evaluation.method_engines import load_corpus_index
from active_rag.linked import linked_articles
from active_rag.rankings import fetch_rankings

WAYS = ("question", "linked")


def added_passages(index: Any, example: Example, top_k: int, more: int) -> tuple[list[str], dict[str, list[str]]]:
    """The first retrieval's passage ids and, per way (:data:`WAYS`), the ids of the ``more`` passages it adds."""
    first = index.retrieve(example.question, top_k)
    held = {p.id for p in first}
    return [p.id for p in first], {
        "question": [p.id for p in fetch_rankings(index, [example.question], more, held)[0][:more]],
        "linked": [p.id for p in linked_articles(index, first, example.question, more, held)],
    }


def recall_table(index: Any, examples: Sequence[Example], top_k: int = 3, more: int = 3) -> dict[str, dict[str, float]]:
    """Per way: ``all_gold`` (% of questions whose prompt holds every gold passage after the added ones),
    ``new_evidence`` (% whose added passages bring a gold passage the first ones lacked), ``linked`` and
    ``linked_without_gold`` (added linked articles a question, and those that are not gold); ``first`` is the
    first retrieval alone."""
    rows = [e for e in examples if e.gold_passage_ids]
    if not rows:
        raise ValueError("No question has gold passage ids: evidence recall needs HotpotQA, 2WikiMultihopQA or StrategyQA.")
    out: dict[str, dict[str, float]] = {"first": {"all_gold": 0.0}}
    for way in WAYS:
        out[way] = {"all_gold": 0.0, "new_evidence": 0.0, "linked": 0.0, "linked_without_gold": 0.0}
    for e in rows:
        gold = set(e.gold_passage_ids)
        first, added = added_passages(index, e, top_k, more)
        out["first"]["all_gold"] += gold <= set(first)
        question_ids = set(added["question"])
        for way, ids in added.items():
            out[way]["all_gold"] += gold <= set(first) | set(ids)
            out[way]["new_evidence"] += bool((gold - set(first)) & set(ids))
            if way == "linked":  # the passages the question's own ranking would not have added first
                linked = [i for i in ids if i not in question_ids]
                out[way]["linked"] += len(linked)
                out[way]["linked_without_gold"] += sum(i not in gold for i in linked)
    for way, stats in out.items():
        for key in stats:
            stats[key] = stats[key] / len(rows) * (100.0 if key in ("all_gold", "new_evidence") else 1.0)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m active_rag.evaluation.linked_recall", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, choices=("hotpotqa", "2wikimultihopqa", "strategyqa"))
    parser.add_argument("--data-dir", type=Path, default=None, help="data folder (default: $ACTIVE_RAG_DATA or ../shared/data)")
    parser.add_argument("--limit", type=int, default=None, help="first N questions only")
    parser.add_argument("--top-k", type=int, default=3, help="passages of the first retrieval (default 3)")
    parser.add_argument("--more", type=int, default=3, help="passages the second retrieval adds (default 3)")
    args = parser.parse_args(argv)
    if args.top_k < 1 or args.more < 1:
        print("error: --top-k and --more must be at least 1.", file=sys.stderr)
        return 2
    try:
        examples = load_dataset(args.dataset, args.data_dir, args.limit)
        index, _, _ = load_corpus_index(args.dataset, args.data_dir)
        table = recall_table(index, examples, args.top_k, args.more)
    except (ActiveRAGError, ValueError) as exc:  # no data folder, a malformed file, no gold ids
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n = sum(1 for e in examples if e.gold_passage_ids)
    print(f"{args.dataset}, {n} questions, BM25 top-{args.top_k}, then {args.more} more passages\n")
    print("| Second retrieval | All gold % | New evidence % | Linked articles / q | of them without gold / q |")
    print("|---|---:|---:|---:|---:|")
    print(f"| none ({args.top_k} passages) | {table['first']['all_gold']:.1f} | - | - | - |")
    for way in WAYS:
        s = table[way]
        print(f"| {way} | {s['all_gold']:.1f} | {s['new_evidence']:.1f} | {s['linked']:.2f} | {s['linked_without_gold']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
