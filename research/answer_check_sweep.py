"""Choose the answer check's ``theta`` and selection rule from rows written with ``theta = 1``.

With ``theta = 1`` the answer check (:mod:`active_rag.answer.check`, the ``look-again`` recipe: docs/recipes.md) looks again after
every answer, so each eval row holds both answers and the model's confidence in each (``answer_check.draft`` and
``.second``: the answer span, its lowest token probability and mean log-probability). What any lower ``theta``
and any selection rule would have kept follows from those numbers without running the model again: an answer
whose weakest answer token has ``p >= theta`` is not checked (the draft stands), otherwise the rule picks one of
the two (``AnswerCheck.keep_second`` itself, with and without ``avoid_echo``). This is how the preset's defaults
were chosen on the first questions of a slice::

    python research/answer_check_sweep.py --dataset hotpotqa --limit 50 \\
        results/eval/hotpotqa/qwen2.5-coder-0.5b/look-again.jsonl

It prints the score of the draft alone (retrieving once), of the second answer alone (the prompt with the next
passages too), of the better of the two per question (an oracle, the ceiling of any rule) and of each
(theta, rule, avoid_echo), with how many answers were checked again. ``--against LABEL=ROWS`` (repeatable) pairs
each rule at ``theta = 1`` with other rows, by question, as ``active_rag.evaluation.compare`` does: how a rule
chosen later would have fared against retrieving once, from the same generations (a rule only picks one of the
two answers the rows hold)::

    python research/answer_check_sweep.py --dataset hotpotqa ROWS --against sr-rag=SR_RAG_ROWS
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from active_rag.evaluation.settled import look_passage_ids
from active_rag.answer.check import PASSAGE_RULES, SELECT_RULES, AnswerCheck, AnswerConfidence, passages_text
from active_rag.evaluation.compare import labelled, read_rows
from active_rag.evaluation.config import PRIMARY_METRICS
from active_rag.evaluation.paired import PairedDifference, paired_differences
from active_rag.evaluation.metrics import qa_scores, strategyqa_accuracy
from active_rag.types import Passage

THETAS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)


def answer_score(answer: str | None, gold: Sequence[str], dataset: str) -> float:
    """The per-question score of an answer span: F1 for the QA slices, accuracy for StrategyQA."""
    if dataset == "strategyqa":
        return strategyqa_accuracy(answer or "", str(gold[0]).strip().lower() == "yes")
    return qa_scores(answer or "", list(gold))["f1"]


def confidence(record: Mapping[str, Any]) -> AnswerConfidence:
    """An answer's record in a row (``AnswerConfidence.to_dict()``) as the object the check reads."""
    mean = record["mean_logprob"]
    return AnswerConfidence(answer=record["answer"], mean_logprob=-math.inf if mean is None else mean,
                            min_prob=record["min_prob"], token=record["token"], tokens=record["tokens"])


def checked_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows usable for the sweep: written with an answer check at ``theta = 1``. Raises ``ValueError``
    naming the fix when a row was written with another ``theta`` (its second answer is missing where it did not
    look again)."""
    out = []
    for row in rows:
        check = row.get("answer_check")
        if not check:
            raise ValueError(f"Row {row.get('id')!r} has no answer check: sweep rows written by the look-again recipe (docs/recipes.md).")
        if check["theta"] < 1.0:
            raise ValueError(f"Row {row.get('id')!r} was written with theta {check['theta']:g}: the sweep needs "
                             "rows written with theta 1 (the look-again recipe's), where every answer was checked.")
        out.append(row)
    return out


def prompt_passages(row: Mapping[str, Any], corpus: Mapping[str, Passage]) -> tuple[str, str]:
    """The text of the passages in the draft's prompt (the answer check's decision, the row's first segment) and in
    the second answer's (what the prompt held after the check's retrieval, the trace's last entry); empty where a
    row does not say."""
    draft_ids, second_ids = look_passage_ids(row)
    return (passages_text(corpus[i] for i in draft_ids if i in corpus),
            passages_text(corpus[i] for i in second_ids if i in corpus))


def added_passages(row: Mapping[str, Any], corpus: Mapping[str, Passage]) -> str:
    """The text of the passages the look added: the second answer's prompt passages that the draft's did not hold."""
    draft_ids, second_ids = look_passage_ids(row)
    return passages_text(corpus[i] for i in second_ids if i in corpus and i not in draft_ids)



def rule_scores(rows: Sequence[Mapping[str, Any]], dataset: str, check: AnswerCheck,
                corpus: Mapping[str, Passage] | None = None) -> list[float]:
    """Per row, the score (0 to 1) of the answer ``check`` would have kept: the draft where it would not have
    looked again (or the row has no second answer), else the one :meth:`AnswerCheck.keep_second` picks."""
    out = []
    for r in rows:
        record = r["answer_check"]
        first = confidence(record["draft"])
        if record["second"] is None or not check.unsure(first):
            out.append(answer_score(record["draft"]["answer"], r["gold"], dataset))
            continue
        reads = corpus is not None and check.reads_passages
        texts = prompt_passages(r, corpus) if reads else None
        added = added_passages(r, corpus) if reads else None
        kept = record["second"] if check.keep_second(first, confidence(record["second"]), r.get("question", ""),
                                                     texts, added) else record["draft"]
        out.append(answer_score(kept["answer"], r["gold"], dataset))
    return out


def against(rows: Sequence[Mapping[str, Any]], baselines: Mapping[str, Sequence[Mapping[str, Any]]], dataset: str,
            corpus: Mapping[str, Passage] | None = None) -> list[PairedDifference]:
    """Each selection rule at ``theta = 1`` (and the draft and the second answer alone) against each baseline's
    rows (label -> rows), paired by question id on the dataset's primary metric, with 95% bootstrap intervals."""
    rows = checked_rows(rows)
    metric = "f1" if "f1" in PRIMARY_METRICS[dataset] else PRIMARY_METRICS[dataset][0]
    scores = {"draft": [answer_score(r["answer_check"]["draft"]["answer"], r["gold"], dataset) for r in rows]}
    scores.update({f"keep by {rule}": rule_scores(rows, dataset, AnswerCheck(select=rule), corpus)
                   for rule in SELECT_RULES if rule not in PASSAGE_RULES or corpus is not None})
    table: dict[str, list[dict[str, Any]]] = {
        label: [{"id": r["id"], "metrics": {metric: s}} for r, s in zip(rows, per_row, strict=True)]
        for label, per_row in scores.items()}
    out = []
    for label, base in baselines.items():
        table[label] = list(base)
        out += [d for d in paired_differences(table, label, [metric]) if d.method in scores]
        del table[label]
    return out


def sweep(rows: Sequence[Mapping[str, Any]], dataset: str, thetas: Sequence[float] = THETAS,
          rules: Sequence[str] = SELECT_RULES, echo: Sequence[bool] = (True, False),
          corpus: Mapping[str, Passage] | None = None) -> dict[str, Any]:
    """Scores (percent) of the draft, the second answer, the per-question oracle, and each (theta, rule,
    ``avoid_echo``), each decided by :class:`~active_rag.answer.check.AnswerCheck` itself. ``corpus`` (passages
    by id) is what the grounded rules read; without it they are left out."""
    rows = checked_rows(rows)
    rules = [r for r in rules if r not in PASSAGE_RULES or corpus is not None]
    n = len(rows)
    if n == 0:
        raise ValueError("No rows to sweep.")
    draft = [answer_score(r["answer_check"]["draft"]["answer"], r["gold"], dataset) for r in rows]
    second = [answer_score(r["answer_check"]["second"]["answer"], r["gold"], dataset) if r["answer_check"]["second"]
              else d for r, d in zip(rows, draft, strict=True)]
    grid = []
    for theta in thetas:
        for rule in rules:
            for avoid_echo in echo if rule != "second" else (False,):
                check = AnswerCheck(theta=theta, select=rule, avoid_echo=avoid_echo)
                looked = sum(r["answer_check"]["second"] is not None
                             and check.unsure(confidence(r["answer_check"]["draft"])) for r in rows)
                grid.append({"theta": theta, "select": rule, "avoid_echo": avoid_echo,
                             "score": 100 * sum(rule_scores(rows, dataset, check, corpus)) / n, "looked": looked})
    return {"n": n, "draft": 100 * sum(draft) / n, "second": 100 * sum(second) / n,
            "oracle": 100 * sum(map(max, draft, second)) / n, "grid": grid}


def format_sweep(result: Mapping[str, Any], dataset: str) -> str:
    metric = "accuracy" if dataset == "strategyqa" else "F1"
    lines = [f"{result['n']} questions; {metric}: draft {result['draft']:.1f}, second {result['second']:.1f}, "
             f"better of the two {result['oracle']:.1f}", "",
             f"| theta | keep by | avoid echo | {metric} | looked again |", "|---:|---|---|---:|---:|"]
    lines += [f"| {g['theta']:g} | {g['select']} | {'yes' if g['avoid_echo'] else 'no'} | {g['score']:.1f} | {g['looked']} |"
              for g in result["grid"]]
    return "\n".join(lines)


def format_against(diffs: Sequence[PairedDifference]) -> str:
    lines = ["", "| answer kept | vs | difference [95% interval] | better / worse | questions |",
             "|---|---|---:|---:|---:|"]
    lines += [f"| {d.method} | {d.baseline} | {100 * d.difference:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}] | "
              f"{d.wins} / {d.losses} | {d.n} |" for d in diffs if d.difference is not None and d.low is not None
              and d.high is not None]
    return "\n".join(lines)


def read_corpus(dataset: str, data_dir: Path | None = None) -> dict[str, Passage] | None:
    """The dataset's corpus by passage id, or ``None`` when there is no data folder or corpus file."""
    from active_rag.errors import ActiveRAGError
    from active_rag.evaluation.datasets import corpus_path
    from active_rag.retrieval.bm25 import read_jsonl_passages

    try:
        path = corpus_path(dataset, data_dir)
    except ActiveRAGError:  # no data folder: the rule is left out
        return None
    if not path.is_file():
        return None
    return {p.id: p for p in read_jsonl_passages(path)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python research/answer_check_sweep.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", type=Path, help="JSONL rows of the look-again recipe (docs/recipes.md), e.g. results/eval/hotpotqa/qwen2.5-coder-0.5b/look-again.jsonl")
    parser.add_argument("--dataset", required=True, choices=["hotpotqa", "2wikimultihopqa", "strategyqa"])
    parser.add_argument("--limit", type=int, default=None, help="the first N rows only (e.g. 50: choose on them)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="data folder whose corpus the 'grounded' rule reads (default: $ACTIVE_RAG_DATA or "
                        "../shared/data; absent: the rule is left out)")
    parser.add_argument("--against", action="append", default=[], type=labelled, metavar="LABEL=ROWS",
                        help="also pair each rule at theta 1 with these rows (e.g. sr-rag=.../sr-rag.jsonl): the "
                        "difference and its 95%% interval over the questions both answered; repeatable")
    args = parser.parse_args(argv)
    try:
        rows = read_rows(args.rows)[: args.limit]
        corpus = read_corpus(args.dataset, args.data_dir)
        result = sweep(rows, args.dataset, corpus=corpus)
        baselines = {label: read_rows(path) for label, path in args.against}
        diffs = against(rows, baselines, args.dataset, corpus) if baselines else []
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_sweep(result, args.dataset))
    if diffs:
        print(format_against(diffs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
