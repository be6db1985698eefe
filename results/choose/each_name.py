"""What asking a "both" question's names one by one (`AnswerStage(each_name=True)`, active_rag.answer.both_names)
changes, from the committed rows: `python results/choose/each_name.py` from the repository root (qwen2.5-coder-1.5b,
`mixed` weights).

HotpotQA dev-b is the only slice with such questions ("Are both A and B P?", "Are A and B both P?": 32 of 125; none in
HotpotQA dev, 2WikiMultihopQA or StrategyQA). Turning the rule on, `active-rag eval` carried over every row the rule
would not ask again and answered the others again with it (active_rag.evaluation.settled.carry_row); the rows written
before are set aside under `other-settings/`, keyed by the engine without the rule. For each dev-b slice and preset
the table pairs the new rows with those (by question id) on the whole slice, and gives the "both" questions, those
answered "yes" (asked), the answers each name's questions turned to "no", the F1 on the "both" questions before and
after, the answers changed better / worse, the gold "no" still answered "yes", and what the asking cost (generated
tokens, prompt tokens read and those prefilled, a question over the slice, before and after: the questions of each
name share the passages' prefix, so most of what they read comes from the prefix cache).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import M, R  # noqa: E402
from active_rag.evaluation.paired import paired_differences  # noqa: E402
from active_rag.answer.both_names import both_question  # noqa: E402

SLICES = [("union", "real", "eval-union"), ("union", "hidden", "eval-union-notitles"), ("pool", "real", "eval")]
PRESETS = ("look-again-choose", "sr-rag-choose")


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def before_rows(folder, method, key):
    """The rows of the engine without the rule: those in ``other-settings/`` whose key the new rows were carried
    over from (their ``settled_from``), by question id."""
    out = {}
    for path in sorted((folder / "other-settings").glob(f"{method}.*.jsonl")):
        for row in read(path):
            if row.get("engine_key") == key:
                out[row["id"]] = row
    return out


def tokens(row):
    """Generated tokens, prompt tokens read (from the prefix cache and prefilled) and prefilled."""
    usage = row.get("prompt_tokens") or {}
    return (row["metrics"].get("generated_tokens", 0), usage.get("cached", 0) + usage.get("prefilled", 0),
            usage.get("prefilled", 0))


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def main():
    print("| Slice | Titles | Preset | n | F1 before / after | difference [95% CI] | both q | asked | turned to no | "
          "F1 on both q: before / after | changed (better / worse) | gold no answered yes: before / after | "
          "generated tokens/q | prompt tokens read/q | prefilled/q |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for corpus, titles, out in SLICES:
        folder = R / out / "hotpotqa-dev-b" / M
        for method in PRESETS:
            path = folder / f"{method}.jsonl"
            if not path.is_file():
                continue
            after = {r["id"]: r for r in read(path)}
            if not any(r.get("each_name") for r in after.values()):
                continue  # not (yet) run with the rule
            keys = {r.get("settled_from") for r in after.values() if not r.get("date_comparison")} - {None}
            if len(keys) != 1:
                continue
            before = before_rows(folder, method, keys.pop())
            ids = [i for i in after if i in before]
            if len(ids) < len(before):
                continue  # still running
            both = [i for i in ids if both_question(after[i]["question"])]
            asked = [i for i in both if after[i].get("each_name")]
            to_no = [i for i in asked if after[i]["each_name"].get("answer") == "no"]
            f1 = lambda rows, sel: 100 * mean([rows[i]["metrics"]["f1"] for i in sel])  # noqa: E731
            d = paired_differences({"after": [after[i] for i in ids], "before": [before[i] for i in ids]}, "before",
                                   ["f1"])[0]
            diff = f"{100 * d.difference:+.1f}"
            diff = f"**{diff}**" if d.low > 0 or d.high < 0 else diff
            better = sum(after[i]["metrics"]["f1"] > before[i]["metrics"]["f1"] for i in ids)
            worse = sum(after[i]["metrics"]["f1"] < before[i]["metrics"]["f1"] for i in ids)
            said_yes = lambda rows: sum(rows[i]["gold"] == ["no"] and rows[i]["answer"].lower().startswith("yes")  # noqa: E731
                                        for i in both)
            gen = [mean([tokens(rows[i])[0] for i in ids]) for rows in (before, after)]
            prompt = [mean([tokens(rows[i])[1] for i in ids]) for rows in (before, after)]
            prefilled = [mean([tokens(rows[i])[2] for i in ids]) for rows in (before, after)]
            print(f"| HotpotQA dev-b, {corpus} | {titles} | {method} | {len(ids)} | {f1(before, ids):.1f} / "
                  f"{f1(after, ids):.1f} | {diff} [{100 * d.low:+.1f}, {100 * d.high:+.1f}] | {len(both)} | "
                  f"{len(asked)} | {len(to_no)} | {f1(before, both):.1f} / {f1(after, both):.1f} | {better} / {worse} | "
                  f"{said_yes(before)} / {said_yes(after)} | {gen[0]:.0f} / {gen[1]:.0f} | {prompt[0]:.0f} / {prompt[1]:.0f} | {prefilled[0]:.0f} / {prefilled[1]:.0f} |")


if __name__ == "__main__":
    main()
