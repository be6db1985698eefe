"""What keeping the draft when the look brought nothing for the change (`AnswerCheck(select="new-evidence")`,
active_rag.answer.check.unsupported_change) would change in the committed `look-again-choose` rows written
with `select="second"`: `python results/choose/new_evidence.py [--model=qwen2.5-coder-0.5b-mixed]` from the
repository root (no model; the corpora as the engine indexes them, titles hidden where the slice hides them).

The rule only picks between the two answers a row already holds, so each row gives both: per slice, how many second
answers it rejects (the engine's own test, active_rag.evaluation.settled.keeps_second), how many of those the draft
scores better or worse on, the slice's F1 before and after, and item 3 (the F1 on the questions whose prompt held
every gold paragraph) before and after. The draft is scored by its answer span (a row keeps the kept answer's full
text only, so the date rule is not applied to it; a run of the preset does). Rows already written with the rule
(`select` "new-evidence") are read as they are.

`--compare`, once `active-rag eval --methods look-again-choose` has resumed a slice under the rule (the rows it carried
over name the key they came from, `settled_from`; the questions it answered again are new rows): per slice, those
questions' F1 before and after and how many turned better or worse, the slice's F1 before and after, and item 3
before and after, the "before" rows read from `other-settings/look-again-choose.<settled_from>.jsonl`.
"""
from collections import Counter
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the repository root: research/
from table import M, R  # noqa: E402
from dates import scores  # noqa: E402
from research.answer_check_sweep import answer_score  # noqa: E402
from active_rag.evaluation.method_engines import corpus_path, hidden_titles  # noqa: E402
from active_rag.evaluation.settled import keeps_second  # noqa: E402
from active_rag.answer.check import passages_text  # noqa: E402
from active_rag.retrieval.bm25 import read_jsonl_passages  # noqa: E402

SLICES = [  # (label, rows folder, dataset folder, dataset, data dir, hidden titles)
    ("HotpotQA dev, pool", "eval", "hotpotqa", "hotpotqa", None, False),
    ("HotpotQA dev-b, pool", "eval", "hotpotqa-dev-b", "hotpotqa", None, False),
    ("2WikiMultihopQA, pool", "eval", "2wikimultihopqa", "2wikimultihopqa", None, False),
    ("StrategyQA, pool", "eval", "strategyqa", "strategyqa", None, False),
    ("HotpotQA dev, union", "eval-union", "hotpotqa", "hotpotqa", "/tmp/union", False),
    ("HotpotQA dev-b, union", "eval-union", "hotpotqa-dev-b", "hotpotqa", "/tmp/union", False),
    ("2WikiMultihopQA, union", "eval-union", "2wikimultihopqa", "2wikimultihopqa", "/tmp/union", False),
    ("HotpotQA dev, union, hidden", "eval-union-notitles", "hotpotqa", "hotpotqa", "/tmp/union", True),
    ("HotpotQA dev-b, union, hidden", "eval-union-notitles", "hotpotqa-dev-b", "hotpotqa", "/tmp/union", True),
    ("2WikiMultihopQA, union, hidden", "eval-union-notitles", "2wikimultihopqa", "2wikimultihopqa", "/tmp/union", True),
]


def main():
    corpora = {}
    print("| Slice | n | second answers rejected | draft better / worse | F1 before / after | all gold: n, F1 before / after |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, folder, ds_folder, dataset, data_dir, hidden in SLICES:
        path = R / folder / ds_folder / M / "look-again-choose.jsonl"
        if not path.is_file():
            continue
        key = (dataset, data_dir, hidden)
        if key not in corpora:
            passages = read_jsonl_passages(corpus_path(dataset, Path(data_dir) if data_dir else None))
            corpora[key] = {p.id: p for p in (hidden_titles(passages) if hidden else passages)}
        by_id = corpora[key]

        def texts(ids):
            return passages_text(by_id[i] for i in ids if i in by_id)

        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        before, after, held_before, held_after, changed = [], [], [], [], []
        for row in rows:
            now = scores(row, dataset)[1]
            new = now
            if row["answer_check"].get("select") == "second" and not keeps_second(row, texts):
                new = answer_score(row["answer_check"]["draft"]["answer"], row["gold"], dataset)
                changed.append((now, new))
            before.append(now)
            after.append(new)
            if set(row.get("gold_passage_ids") or []) <= set(row.get("final_passage_ids") or []):
                held_before.append(now)
                held_after.append(new)
        pct = lambda xs: 100 * sum(xs) / max(len(xs), 1)  # noqa: E731
        print(f"| {label} | {len(rows)} | {len(changed)} | {sum(b > a for a, b in changed)} / "
              f"{sum(b < a for a, b in changed)} | {pct(before):.1f} / {pct(after):.1f} | "
              f"{len(held_before)}, {pct(held_before):.1f} / {pct(held_after):.1f} |")


def compare():
    print("| Slice | answered again | their F1 before / after (better / worse) | F1 before / after | "
          "all gold: n, F1 before / after |")
    print("|---|---:|---:|---:|---:|")
    for label, folder, ds_folder, dataset, _, _ in SLICES:
        path = R / folder / ds_folder / M / "look-again-choose.jsonl"
        if not path.is_file():
            continue
        now = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
        keys = Counter(r["settled_from"] for r in now.values() if r.get("settled_from"))
        if not keys:
            continue
        old_path = path.parent / "other-settings" / f"look-again-choose.{keys.most_common(1)[0][0]}.jsonl"
        old = {r["id"]: r for r in map(json.loads, old_path.read_text().splitlines())}
        f1 = lambda row: scores(row, dataset)[1]  # noqa: E731
        again = [i for i, r in now.items() if not r.get("settled_from")]
        pairs = [(f1(old[i]), f1(now[i])) for i in again if i in old]
        held = lambda row: set(row.get("gold_passage_ids") or []) <= set(row.get("final_passage_ids") or [])  # noqa: E731
        pct = lambda xs: 100 * sum(xs) / max(len(xs), 1)  # noqa: E731
        hb, ha = [f1(r) for r in old.values() if held(r)], [f1(r) for r in now.values() if held(r)]
        print(f"| {label} | {len(again)} | {pct([a for a, _ in pairs]):.1f} / {pct([b for _, b in pairs]):.1f} "
              f"({sum(b > a for a, b in pairs)} / {sum(b < a for a, b in pairs)}) | "
              f"{pct([f1(r) for r in old.values()]):.1f} / {pct([f1(r) for r in now.values()]):.1f} | "
              f"{len(hb)}, {pct(hb):.1f} / {len(ha)}, {pct(ha):.1f} |")


if __name__ == "__main__":
    compare() if "--compare" in sys.argv else main()
