"""What settling comparisons of dates (`AnswerStage(dates=True)`, active_rag.answer.dates) changes, from the
committed rows: `python results/choose/dates.py` from the repository root (qwen2.5-coder-1.5b, `mixed` weights).

The rule reads only the question and the text the reader wrote, so each row gives both answers: the reader's own
(the span after "So the answer is") and the option the dates in its reasoning choose. For every slice and method
the table gives the F1 of each, the paired difference, and how many questions compare things in time, how many the
dates settle and how many answers they change (better / worse). Retrieving once (three and six passages) never
settles dates as a method; its rows show what the rule alone would give it. `--all-gold` prints item 3 instead: the
F1 on each method's own questions whose prompt held every gold paragraph, without and with the rule.
`--against-control` pairs each preset, dates settled, against the six-passage control with and without the rule
(the questions both answered): how much of the preset's gain is the links and how much the dates.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the repository root: research/
from table import SLICES, M, R, dataset_of  # noqa: E402
from stop_estimate import rows  # noqa: E402
from research.answer_check_sweep import answer_score  # noqa: E402
from active_rag.evaluation.answers import extract_answer  # noqa: E402
from active_rag.evaluation.paired import paired_differences  # noqa: E402
from active_rag.answer.dates import settle_dates  # noqa: E402

#: label -> (folder index in a SLICES part: 1 the control's, 2 the methods'; the rows file)
METHODS = {"retrieve once, 3": (2, "sr-rag"), "retrieve once, 6": (1, "sr-rag"),
           "sr-rag-choose": (2, "sr-rag-choose"), "look-again-choose": (2, "look-again-choose")}


def scores(row, dataset, each_name=True):
    """The reader's answer's score and the settled answer's, and what the rule did: None (not a comparison in
    time), "asked" (no two dates that differ), "settled", or "each-name" (a "both" question the engine settled by
    asking each name, ``AnswerStage(each_name=True)``: the row's ``each_name`` holds the answer; ``each_name=False``:
    the date rule alone)."""
    if dataset == "strategyqa":
        return row["metrics"]["accuracy"], row["metrics"]["accuracy"], None
    own = answer_score(extract_answer(row["prediction"]) or "", row["gold"], dataset)
    asked = (row.get("each_name") or {}).get("answer")  # a "both" question settled by each name's answer
    if asked and each_name:
        return own, answer_score(asked, row["gold"], dataset), "each-name"
    settled = settle_dates(row["question"], row["prediction"])
    if settled is None:
        return own, own, None
    if settled.answer is None:
        return own, own, "asked"
    return own, answer_score(settled.answer, row["gold"], dataset), "settled"


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def against_control():
    print("| Slice | Corpus | Titles | Method | n | F1 | vs six passages [95% CI] | vs six passages, dates settled [95% CI] |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for name, corpus, titles, parts in SLICES:
        dataset = dataset_of(name)
        control = rows([R / part[1] / part[0] / M / "sr-rag.jsonl" for part in parts])
        if control is None:
            continue
        for method in ("sr-rag-choose", "look-again-choose"):
            got = rows([R / part[2] / part[0] / M / f"{method}.jsonl" for part in parts])
            if got is None:
                continue
            ids = sorted(set(got) & set(control))
            mine = [{"id": i, "metrics": {"f1": scores(got[i], dataset)[1]}} for i in ids]
            cells = []
            for which in (0, 1):
                base = [{"id": i, "metrics": {"f1": scores(control[i], dataset)[which]}} for i in ids]
                d = paired_differences({"m": mine, "b": base}, "b", ["f1"])[0]
                text = f"{100 * d.difference:+.1f}"
                cells.append(f"{'**' + text + '**' if d.low > 0 or d.high < 0 else text} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]")
            print(f"| {name} | {corpus} | {titles} | {method} | {len(ids)} | {100 * mean([m['metrics']['f1'] for m in mine]):.1f} | "
                  f"{cells[0]} | {cells[1]} |")


def main():
    if "--against-control" in sys.argv:
        return against_control()
    all_gold = "--all-gold" in sys.argv
    if all_gold:
        print("| Slice | Corpus | Titles | " + " | ".join(f"{m}: n, F1 without / with" for m in METHODS) + " |")
        print("|---|---|---|" + "---:|" * len(METHODS))
    else:
        print("| Slice | Corpus | Titles | Method | n | F1, the reader's answer | F1, dates settled | difference [95% CI] "
              "| compare in time | settled | changed (better / worse) |")
        print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, corpus, titles, parts in SLICES:
        dataset = dataset_of(name)
        if dataset == "strategyqa":
            continue  # yes/no questions: none is a choice question
        cells = []
        for label, (which, method) in METHODS.items():
            got = rows([R / part[which] / part[0] / M / f"{method}.jsonl" for part in parts])
            if got is None:
                cells.append("-")
                continue
            scored = {i: scores(r, dataset, each_name=False) for i, r in got.items()}  # the date rule alone
            if all_gold:
                held = [i for i, r in got.items() if r["metrics"].get("evidence_recall") == 1.0]
                cells.append(f"{len(held)}, {100 * mean([scored[i][0] for i in held]):.1f} / "
                             f"{100 * mean([scored[i][1] for i in held]):.1f}")
                continue
            own = [{"id": i, "metrics": {"f1": s[0]}} for i, s in scored.items()]
            new = [{"id": i, "metrics": {"f1": s[1]}} for i, s in scored.items()]
            d = paired_differences({"new": new, "own": own}, "own", ["f1"])[0]
            text = f"{100 * d.difference:+.1f}"
            text = f"**{text}**" if d.low > 0 or d.high < 0 else text
            asked = sum(s[2] is not None for s in scored.values())
            settled = sum(s[2] == "settled" for s in scored.values())
            better = sum(s[1] > s[0] for s in scored.values())
            worse = sum(s[1] < s[0] for s in scored.values())
            print(f"| {name} | {corpus} | {titles} | {label} | {len(got)} | {100 * mean([s[0] for s in scored.values()]):.1f} | "
                  f"{100 * mean([s[1] for s in scored.values()]):.1f} | {text} [{100 * d.low:+.1f}, {100 * d.high:+.1f}] | "
                  f"{asked} | {settled} | {better} / {worse} |")
        if all_gold:
            print(f"| {name} | {corpus} | {titles} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
