"""The sr-rag-choose evidence table from the committed rows (one line per slice), paired against the six-passage
control: `python results/choose/table.py` from the repository root (the rows come from the `active-rag eval`
commands in docs/context.md, "Choose per question what to read"). `python results/choose/table.py METHOD` pairs
another method's rows (e.g. `sr-rag-choose@context=read-links`) against the same control.

`--without-dates` (here and in grid.py, stop_estimate.py, no_link_estimate.py): score every row by the answer its
reader wrote, as before `sr-rag-choose` and `look-again-choose` settled comparisons of dates (`AnswerStage(dates=True)`;
their rows were settled from rows written without it: `settled_from`); the tables of docs/context.md written before
the rule are these. `--model=qwen2.5-coder-0.5b-mixed` (here and in every script that reads the rows through this
one) reads another model's rows."""
import atexit
import json
import shutil
import sys
import tempfile
from pathlib import Path
from active_rag.evaluation.answers import extract_answer
from active_rag.evaluation.compare import compare_rows
from active_rag.evaluation.metrics import qa_scores

#: the rows' model folder (``--model=...``)
M = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--model=")), "qwen2.5-coder-1.5b-mixed")
R = Path(__file__).resolve().parent.parent
def f(folder, ds, method): return R / folder / ds / M / f"{method}.jsonl"
SLICES = [
    ("HotpotQA dev", "union", "real", [("hotpotqa", "eval-union-budget", "eval-union")]),
    ("HotpotQA dev-b", "union", "real", [("hotpotqa-dev-b", "eval-union-budget", "eval-union")]),
    ("HotpotQA dev + dev-b", "union", "real", [("hotpotqa", "eval-union-budget", "eval-union"), ("hotpotqa-dev-b", "eval-union-budget", "eval-union")]),
    ("2WikiMultihopQA", "union", "real", [("2wikimultihopqa", "eval-union-budget", "eval-union")]),
    ("HotpotQA dev", "union", "hidden", [("hotpotqa", "eval-union-notitles-budget", "eval-union-notitles")]),
    ("HotpotQA dev-b", "union", "hidden", [("hotpotqa-dev-b", "eval-union-notitles-budget", "eval-union-notitles")]),
    ("HotpotQA dev + dev-b", "union", "hidden", [("hotpotqa", "eval-union-notitles-budget", "eval-union-notitles"), ("hotpotqa-dev-b", "eval-union-notitles-budget", "eval-union-notitles")]),
    ("2WikiMultihopQA", "union", "hidden", [("2wikimultihopqa", "eval-union-notitles-budget", "eval-union-notitles")]),
    ("HotpotQA dev", "pool", "real", [("hotpotqa", "eval-budget", "eval")]),
    ("HotpotQA dev-b", "pool", "real", [("hotpotqa-dev-b", "eval-budget", "eval")]),
    ("2WikiMultihopQA", "pool", "real", [("2wikimultihopqa", "eval-budget", "eval")]),
    ("StrategyQA", "pool", "none", [("strategyqa", "eval-budget", "eval")]),
]
WITHOUT_DATES = "--without-dates" in sys.argv
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
TMP = Path(tempfile.mkdtemp(prefix="choose-table-"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)


def dataset_of(slice_name):
    """The dataset whose metric scores a slice of :data:`SLICES`."""
    return "strategyqa" if "Strategy" in slice_name else ("2wikimultihopqa" if "2Wiki" in slice_name else "hotpotqa")


def as_written(row):
    """``row`` scored by the answer its reader wrote when ``--without-dates`` is given (a row whose dates settled
    the answer gets the metrics of the span after "So the answer is" back), else as it is."""
    settled = row.get("date_comparison") or {}
    if not WITHOUT_DATES or not settled.get("answer") or "f1" not in row.get("metrics", {}):
        return row
    answer = extract_answer(row["prediction"]) or ""
    return {**row, "answer": answer, "metrics": {**row["metrics"], **qa_scores(answer, row["gold"])}}


def lines(path):
    """The rows of ``path`` as JSON lines, through :func:`as_written`."""
    return [json.dumps(as_written(json.loads(line))) for line in path.read_text().splitlines() if line.strip()]


def cat(paths):
    """The rows of ``paths`` in one file (dev and dev-b together), or None when one is missing."""
    rows = []
    for p in paths:
        if not p.is_file():
            return None
        rows += lines(p)
    out = TMP / f"{len(list(TMP.iterdir()))}.jsonl"
    out.write_text("\n".join(rows) + "\n")
    return out
def paired(*paths):
    """The question ids every file answered."""
    ids = [{json.loads(line)["id"] for line in p.read_text().splitlines() if line.strip()} for p in paths]
    return set.intersection(*ids)


def bold(d):
    """The difference, in bold when its interval excludes zero."""
    text = f"{100 * d.difference:+.1f}"
    return f"**{text}**" if d.low > 0 or d.high < 0 else text


def num(v, s=100, d=1): return "-" if v is None else f"{s*v:.{d}f}"
def main():
    METHOD = ARGS[0] if ARGS else "sr-rag-choose"
    out = [f"| Slice | Corpus | Titles | n | control F1 | `{METHOD}` F1 | vs control [95% CI] (wins / losses) | calls/q | prompt tokens/q | s/q | all gold % | F1 when all gold |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, corpus, titles, parts in SLICES:
        control = cat([f(b, ds, "sr-rag") for ds, b, _ in parts]); choose = cat([f(c, ds, METHOD) for ds, _, c in parts])
        if control is None or choose is None: continue
        both = paired(control, choose)  # every column over the questions both answered
        for path in (control, choose):
            path.write_text("".join(line + "\n" for line in path.read_text().splitlines() if json.loads(line)["id"] in both))
        dataset = dataset_of(name)
        summary, diffs = compare_rows({"control": control, "choose": choose}, ["control"], dataset)
        d = diffs[0]; c, m = summary["control"], summary["choose"]
        metric = "f1" if dataset != "strategyqa" else "accuracy"
        # the control's score over the paired questions
        out.append(f"| {name} | {corpus} | {titles} | {d.n} | {num(d.baseline_mean)} | {num(d.method_mean)} | "
                   f"{bold(d)} [{100*d.low:+.1f}, {100*d.high:+.1f}] ({d.wins} / {d.losses}) | "
                   f"{num(m.get('retriever_calls_per_question'),1,2)} | {num(c.get('prompt_tokens_per_question'),1,0)} / {num(m.get('prompt_tokens_per_question'),1,0)} | "
                   f"{num(c.get('seconds_per_question'),1)} / {num(m.get('seconds_per_question'),1)} | "
                   f"{num(c.get('evidence_recall'))} / {num(m.get('evidence_recall'))} | {num(c.get('score_all_gold'))} / {num(m.get('score_all_gold'))} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
