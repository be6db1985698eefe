"""What answering a "same X" question by each name's value (`AnswerStage(same=True)`, active_rag.answer.same_value)
changes, from the committed rows: `python results/choose/same_value.py` from the repository root.

Turning the rule on, `active-rag eval` carried over every row whose question it does not read as a "same X" question
and answered those again (active_rag.evaluation.settled.convert_row, rule "same"); the rows written before are set
aside under `other-settings/`, keyed by the engine without the rule. For each file of the presets with the rule, the
table pairs the new rows with those (by question id) on the whole slice, and gives the "same" questions, the answers
changed better / worse, the F1 on those questions before and after, and the questions the values settled (the
reader's answer stands where a value is missing).
"""
import json
from pathlib import Path

from active_rag.answer.same_value import same_question
from active_rag.evaluation.paired import paired_differences

R = Path(__file__).resolve().parent.parent
FILES = [
    ("pydocs dev", "eval/pydocs"),
    ("pydocs, another folder", "eval-heldout/pydocs-fresh/eval/pydocs"),
    ("HotpotQA dev-b, union", "eval-union/hotpotqa-dev-b"),
    ("HotpotQA dev-b, union, titles hidden", "eval-union-notitles/hotpotqa-dev-b"),
    ("HotpotQA dev-b, pool", "eval/hotpotqa-dev-b"),
    ("2WikiMultihopQA, union", "eval-union/2wikimultihopqa"),
    ("2WikiMultihopQA, union, titles hidden", "eval-union-notitles/2wikimultihopqa"),
    ("2WikiMultihopQA, pool", "eval/2wikimultihopqa"),
]
METHODS = [("qwen2.5-coder-1.5b-mixed", "sr-rag-choose"), ("qwen2.5-coder-1.5b-mixed", "look-again-choose"),
           ("qwen2.5-coder-0.5b-mixed", "look-again-choose@context=focus"), ("qwen2.5-coder-0.5b-mixed", "look-again-choose"),
           ("qwen2.5-coder-0.5b-mixed", "sr-rag-choose")]


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def before_rows(folder, method, keys):
    """The rows the new ones were carried over from or replace: in ``other-settings/``, with one of ``keys``."""
    out = {}
    for path in sorted((folder / "other-settings").glob(f"{method}.*.jsonl")):
        if "@" not in method and "@" in path.name:
            continue
        for row in read(path):
            if row.get("engine_key") in keys:
                out[row["id"]] = row
    return out


def f1(row):
    return row["metrics"].get("f1", 0.0)


def main():
    print("| Slice | Model | Preset | n | F1 before / after | difference [95% CI] | \"same\" questions | settled by the values | "
          "F1 on them: before / after | changed (better / worse) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, rel in FILES:
        for model, method in METHODS:
            folder = R / rel / model
            path = folder / f"{method}.jsonl"
            if not path.is_file():
                continue
            after = {r["id"]: r for r in read(path)}
            same = [i for i, r in after.items() if same_question(str(r.get("question", ""))) is not None]
            if not same or not any((after[i].get("each_name") or {}).get("rule") == "same" for i in same):
                continue  # not run with the rule yet
            keys = {r.get("settled_from") for r in after.values() if r.get("settled_from")}
            before = before_rows(folder, method, keys)
            ids = [i for i in after if i in before]
            if len(ids) < len(after):
                print(f"| {label} | {model} | {method} | rows before missing for {len(after) - len(ids)} questions |")
                continue
            diff = paired_differences({"before": [before[i] for i in ids], "after": [after[i] for i in ids]},
                                      "before", ["f1"])[0]
            settled = sum(1 for i in same if (after[i].get("each_name") or {}).get("answer"))
            better = sum(1 for i in same if f1(after[i]) > f1(before[i]))
            worse = sum(1 for i in same if f1(after[i]) < f1(before[i]))
            mean = lambda rows: 100 * sum(f1(r) for r in rows) / len(rows)  # noqa: E731
            print(f"| {label} | {model.split('-mixed')[0]} | `{method}` | {len(ids)} | {mean([before[i] for i in ids]):.1f} / "
                  f"{mean([after[i] for i in ids]):.1f} | {100 * diff.difference:+.1f} [{100 * diff.low:+.1f}, {100 * diff.high:+.1f}] | "
                  f"{len(same)} | {settled} | {mean([before[i] for i in same]):.1f} / {mean([after[i] for i in same]):.1f} | "
                  f"{better} / {worse} |")


if __name__ == "__main__":
    main()
