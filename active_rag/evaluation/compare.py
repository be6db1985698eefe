"""Compare evaluation rows written by separate runs.

``active-rag eval`` compares the methods of one run against one baseline. The payoff question needs more: a
configuration against SR-RAG at three passages *and* against the equal-budget control (SR-RAG with as many
passages as the configuration's final prompt holds on average), whose rows live in another output folder
(``--top-k K --out results/eval-budget``). :func:`compare_rows` reads any JSONL files of one dataset, pairs them by
question id with each named baseline (paired bootstrap, :mod:`active_rag.evaluation.paired`) and reports the
retrieval and evidence columns of :func:`~active_rag.evaluation.scoring.summarize_rows`::

    python -m active_rag.evaluation.compare --dataset hotpotqa \\
        sr-rag=results/eval/hotpotqa/qwen2.5-coder-0.5b/sr-rag.jsonl \\
        control=results/eval-budget/hotpotqa/qwen2.5-coder-0.5b/sr-rag.jsonl \\
        dragin-accumulate=results/eval/hotpotqa/qwen2.5-coder-0.5b/dragin@ir@context=accumulate.jsonl \\
        --baseline sr-rag --baseline control [--by choice]

``--settle LABEL`` adds a column ``LABEL+rules``: that file's rows as the engine's answer rules that read only the
finished answer and its prompt's passages would settle them (dates, and versions from the reasoning or the options'
own passages; :func:`~active_rag.evaluation.settled.settle_row`), with no model call: a control given the rules
that are not about what it reads.

``--by choice`` (or ``form``) adds a table per group of questions: what ``sr-rag-choose`` reads for them, or their
form. Older rows lack the evidence metrics; for a single-round method (every row one retrieval with
the question, whose passages the answer's prompt holds) they are derived from the trace, elsewhere the cell reads
``-``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from active_rag.evaluation.paired import PairedDifference, paired_differences
from active_rag.evaluation.config import PRIMARY_METRICS
from active_rag.evaluation.scoring import summarize_rows


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of one JSONL file (errors and blank lines skipped); one clear error for a missing file."""
    if not path.is_file():
        raise FileNotFoundError(f"No rows at {path}: run `active-rag eval` first or fix the path.")
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if not row.get("error"):
                rows.append(row)
    return rows


def with_evidence(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with ``evidence_recall`` and ``final_passages`` derived from its trace when it predates them and
    retrieved exactly once, before its first token (single round: the answer's prompt holds those passages)."""
    metrics = row.get("metrics", {})
    trace = row.get("trace") or []
    gold = row.get("gold_passage_ids")
    if "evidence_recall" in metrics or not gold or len(trace) != 1 or trace[0].get("position") != 0:
        return row
    held = set(trace[0].get("passage_ids") or [])
    metrics = {**metrics, "evidence_recall": float(all(g in held for g in gold)), "final_passages": len(held)}
    return {**row, "metrics": metrics}


#: ``--by``: how to group questions, from a row's question text
GROUPINGS = ("choice", "form", "type")


def group_of(row: Mapping[str, Any], by: str, types: Mapping[str, str] | None = None) -> str:
    """The group of ``row`` by its question: ``"choice"``: what ``sr-rag-choose`` reads
    (:func:`active_rag.answer.read_choice.choose_reading`: ``compare`` or ``links``); ``"form"``: choice, yes-no or open
    (:func:`active_rag.answer.read_choice.question_form`); ``"type"``: the type the dataset labels it with (the
    row's ``type``, else ``types[id]``: :func:`active_rag.evaluation.breakdown.question_types`)."""
    from active_rag.answer.read_choice import choose_reading, question_form

    if by == "type":
        return str(row.get("type") or (types or {}).get(str(row.get("id")), "-"))
    question = str(row.get("question") or "")
    return choose_reading(question).way if by == "choice" else question_form(question)


def compare_rows(
    files: Mapping[str, Path], baselines: Sequence[str], dataset: str, keep: Any = None,
) -> tuple[dict[str, dict[str, Any]], list[PairedDifference]]:
    """Summaries of every labelled file and the paired differences of each against each baseline, on the
    dataset's primary metric (F1, or accuracy for StrategyQA), over the questions both answered; ``keep``: a
    predicate on rows (a group of questions)."""
    rows = {}
    for label, path in files.items():
        read = [r for r in read_rows(path) if keep is None or keep(r)]
        single_round = all(len(r.get("trace") or []) == 1 and r["trace"][0].get("position") == 0 for r in read)
        rows[label] = [with_evidence(r) for r in read] if single_round else read  # never a subset's evidence
    summary = {label: summarize_rows(r, dataset) for label, r in rows.items()}
    metric = "f1" if "f1" in PRIMARY_METRICS[dataset] else PRIMARY_METRICS[dataset][0]
    for label, read in rows.items():  # the reader's score where the evidence was all there: its ceiling
        held_all = [r["metrics"][metric] for r in read if r.get("metrics", {}).get("evidence_recall") == 1.0]
        summary[label]["score_all_gold"] = sum(held_all) / len(held_all) if held_all else None
    diffs = [d for base in baselines for d in paired_differences(rows, base, [metric])]
    return summary, diffs


def _num(value: Any, scale: float = 1.0, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{scale * float(value):.{digits}f}"


def format_comparison(summary: Mapping[str, Mapping[str, Any]], diffs: Sequence[PairedDifference],
                      baselines: Sequence[str], dataset: str) -> str:
    """One markdown row per file: score, the difference against each baseline with its 95% paired interval, and
    retrievals, the cost per question (retriever calls, prompt tokens read), passages and evidence at answer time, the score on the questions whose final prompt held every gold
    passage (what the reader makes of complete evidence), new-evidence rate of the method's own queries, s/q."""
    metric = "f1" if "f1" in PRIMARY_METRICS[dataset] else PRIMARY_METRICS[dataset][0]
    head = ["Method", "n", metric.upper() if metric == "f1" else metric.capitalize()]
    head += [f"vs {b} [95% CI]" for b in baselines]
    head += ["Ret/q", "Calls/q", "Prompt tok/q", "Passages@answer", "All gold@answer %", f"{head[2]} when all gold", "New ev. % (own query)", "s/q"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "|".join("---:" for _ in head[1:]) + "|"]
    by_pair = {(d.method, d.baseline): d for d in diffs}
    for label, m in summary.items():
        cells = [label, str(int(m.get("n") or 0)), _num(m.get(metric), 100)]
        for base in baselines:
            d = by_pair.get((label, base))
            if label == base or d is None or d.difference is None:
                cells.append("-")
            else:
                ci = f" [{100 * d.low:+.1f}, {100 * d.high:+.1f}]" if d.low is not None and d.high is not None else ""
                cells.append(f"{100 * d.difference:+.1f}{ci} (n={d.n})")
        cells += [_num(m.get("retrievals_per_question"), digits=2), _num(m.get("retriever_calls_per_question"), digits=2),
                  _num(m.get("prompt_tokens_per_question"), digits=0), _num(m.get("final_passages")),
                  _num(m.get("evidence_recall"), 100), _num(m.get("score_all_gold"), 100),
                  _num(m.get("active_new_evidence_rate"), 100),
                  _num(m.get("seconds_per_question"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def settled_file(path: Path, dataset: str, data_dir: Path | None, out: Path) -> Path:
    """``path``'s rows settled by the answer rules of ``--settle`` (see the module docstring), written to ``out``."""
    from active_rag.evaluation.method_engines import load_corpus_index
    from active_rag.evaluation.settled import row_passages, settle_row
    from active_rag.answer.check import passages_text

    index, _, _ = load_corpus_index(dataset, data_dir)
    by_id = {p.id: p for p in index.passages}

    def texts(ids: Sequence[str]) -> str:
        return passages_text(by_id[i] for i in ids if i in by_id)

    rows = [settle_row(r, str(r.get("engine_key")), "dates+versions", row_passages(r, texts)) for r in read_rows(path)]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out


def labelled(spec: str) -> tuple[str, Path]:
    label, sep, path = spec.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"{spec!r}: write LABEL=PATH, e.g. sr-rag=results/eval/hotpotqa/MODEL/sr-rag.jsonl")
    return label, Path(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m active_rag.evaluation.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, choices=sorted(PRIMARY_METRICS))
    parser.add_argument("files", nargs="+", type=labelled, metavar="LABEL=PATH", help="rows of one method (JSONL)")
    parser.add_argument("--baseline", action="append", default=[], help="a LABEL to compare every row against (repeatable)")
    parser.add_argument("--by", choices=GROUPINGS, default=None,
                        help="also one table per group of questions: choice (what sr-rag-choose reads: compare or "
                             "links), form (choice, yes-no, open) or type (as the dataset labels its questions)")
    parser.add_argument("--data-dir", type=Path, default=None, help="--by type: the data folder (default: $ACTIVE_RAG_DATA or ../shared/data)")
    parser.add_argument("--split", default="dev", help="--by type: the question file (default dev)")
    parser.add_argument("--all-rows", action="store_true",
                        help="score each file on all its rows (default: only the questions every file answered, so "
                             "that each column is read on the same questions)")
    parser.add_argument("--settle", action="append", default=[], metavar="LABEL",
                        help="also LABEL+rules: LABEL's rows settled by the dates and versions rules, from their "
                             "answers and prompts' passages (reads the dataset's corpus; repeatable)")
    args = parser.parse_args(argv)
    files = dict(args.files)
    missing = [b for b in args.settle if b not in files]
    missing += [b for b in args.baseline if b not in files and b not in {f"{s}+rules" for s in args.settle}]
    if missing:
        parser.exit(2, f"error: {missing[0]!r} is not one of the labels {sorted(files)}: name a LABEL=PATH.\n")
    scratch = tempfile.TemporaryDirectory(prefix="active-rag-compare-")
    try:
        for label in args.settle:
            files[f"{label}+rules"] = settled_file(files[label], args.dataset, args.data_dir,
                                                   Path(scratch.name) / f"{len(files)}.jsonl")
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        parser.exit(2, f"error: {exc}\n")
    try:
        ids = [{str(r.get("id")) for r in read_rows(path)} for path in files.values()]
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        parser.exit(2, f"error: {exc}\n")
    common = set.intersection(*ids)
    if not args.all_rows and any(len(i) != len(common) for i in ids):
        print(f"compare: {len(common)} question(s) answered in every file; the others are left out (--all-rows keeps them)",
              file=sys.stderr)

    def kept(row: Mapping[str, Any]) -> bool:
        return args.all_rows or str(row.get("id")) in common

    summary, diffs = compare_rows(files, args.baseline, args.dataset, keep=kept)
    sys.stdout.write(format_comparison(summary, diffs, args.baseline, args.dataset))
    if args.by:
        types: dict[str, str] = {}
        if args.by == "type":
            from active_rag.evaluation.breakdown import question_types
            from active_rag.evaluation.datasets import load_dataset

            try:
                types = question_types(load_dataset(args.dataset, args.data_dir, resolve_gold_ids=False, split=args.split))
            except Exception as exc:  # noqa: BLE001 - rows without a type then group as "-"
                print(f"warning: no question types from the {args.dataset} files ({exc}); rows without one group as '-'",
                      file=sys.stderr)
        groups = sorted({group_of(r, args.by, types) for path in files.values() for r in read_rows(path)})
        for group in groups:
            summary, diffs = compare_rows(files, args.baseline, args.dataset,
                                          keep=lambda r, g=group: kept(r) and group_of(r, args.by, types) == g)
            sys.stdout.write(f"\n{args.by} = {group}\n\n" + format_comparison(summary, diffs, args.baseline, args.dataset))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
