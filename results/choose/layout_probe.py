"""Probe (not part of the engine): which of the passages a look holds the reader should read.

`look-again-choose` answers again from six passages (the question's three, then the three its look added). On the
0.5B model that prompt costs the reader 12.4 F1 against the gold paragraphs alone (three passages' costs 5.4,
docs/context.md, "Distraction or difficulty"). This probe re-answers each question whose draft was sent on (the
rows' second answers) with SR-RAG's reader from a layout of the same held passages, taken from the row's trace
without the model: which passages, in what order. `held` is the prompt as the engine built it (the control: the
same reader machinery on the same passages); the others leave passages out, in the engine's order:

- `held`: q1 q2 q3 + the look's three (a: a linked article, n: one of the question's next passages)
- `q12a12`: q1 q2, then the look's first two passages (four)
- `q12a1`: q1 q2, then the look's first passage (three)
- `q1a12`: q1, then the look's first two passages (three)
- `q1a1`: q1 and the look's first passage (two)
- `q123a1`: q1 q2 q3, then the look's first passage (four)

`--choice compare` (or `links`) probes only the looks the question's form sent that way (the trace's `choice`).

    P=results/layout-probe/qwen2.5-coder-0.5b-mixed
    python results/choose/layout_probe.py --model qwen2.5-coder-0.5b --rows \
        results/eval/hotpotqa/qwen2.5-coder-0.5b-mixed/look-again-choose.jsonl --out $P/hotpotqa.jsonl \
        --layouts held,q12a12,q12a1   # the layouts run (docs/context.md); resumable
    python results/choose/layout_probe.py --report $P/hotpotqa.jsonl

`--report` gives each layout's F1 on the sent-on questions paired against `held`, and how often each layout holds
every gold paragraph.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gold_only import Fixed, reader_args  # noqa: E402

LAYOUTS = ("held", "q12a12", "q12a1", "q1a12", "q1a1", "q123a1")


def layouts(row: dict) -> dict[str, list[str]]:
    first = row["trace"][0]["passage_ids"]
    added = row["trace"][-1]["passage_ids"]
    held = row["final_passage_ids"]
    return {"held": held, "q12a12": first[:2] + added[:2], "q12a1": first[:2] + added[:1],
            "q1a12": first[:1] + added[:2], "q1a1": first[:1] + added[:1], "q123a1": first[:3] + added[:1]}


def choice(row: dict) -> str:
    """The way the question's form sent its look (``compare``, ``links``), or ``""``."""
    return next((t["choice"] for t in row["trace"] if t.get("choice")), "")


def run(args) -> None:
    import torch

    from active_rag.decoding.model import ActiveLM
    from active_rag.evaluation.config import EvalConfig, MethodSpec
    from active_rag.evaluation.datasets import corpus_path, load_dataset
    from active_rag.evaluation.method_engines import build_engine
    from active_rag.evaluation.scoring import score_example
    from active_rag.retrieval.bm25 import read_jsonl_passages

    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in args.rows.open()]
    rows = [r for r in rows if r["answer_check"]["fired"] and (args.choice is None or choice(r) == args.choice)]
    examples = {e.id: e for e in load_dataset(args.dataset, split=args.split)}
    by_id = {p.id: p for p in read_jsonl_passages(args.corpus or corpus_path(args.dataset))}
    done = set()
    if args.out.exists():
        done = {(r["id"], r["layout"]) for r in map(json.loads, args.out.open())}
    lm = ActiveLM.load(args.model, weights=args.weights)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for layout in args.layouts.split(","):
        todo = [r for r in rows if (r["id"], layout) not in done][: args.limit]
        if not todo:
            continue
        chosen = {r["question"]: [by_id[i] for i in layouts(r)[layout]] for r in todo}
        config = EvalConfig(dataset=args.dataset, top_k=max(len(v) for v in chosen.values()))
        engine = build_engine(MethodSpec("sr-rag", preset="sr-rag"), lm, Fixed(chosen), config)
        for start in range(0, len(todo), args.batch_size):
            chunk = todo[start:start + args.batch_size]
            results = engine.run_batch([r["question"] for r in chunk], batch_size=args.batch_size)
            with args.out.open("a") as fh:
                for row, result in zip(chunk, results):
                    answer, metrics = score_example(examples[row["id"]], result)
                    fh.write(json.dumps({"id": row["id"], "layout": layout, "answer": answer, "f1": metrics["f1"],
                                         "passage_ids": result.final_passage_ids,
                                         "all_gold": set(row["gold_passage_ids"]) <= set(result.final_passage_ids)})
                             + "\n")
            print(f"{layout} {start + len(chunk)}/{len(todo)}", file=sys.stderr, flush=True)


def report(path: Path) -> None:
    from active_rag.evaluation.paired import paired_bootstrap

    got: dict[str, dict[str, dict]] = {}
    for r in map(json.loads, path.open()):
        got.setdefault(r["layout"], {})[r["id"]] = r
    base = got.get("held", {})
    print(f"{path}\n| Layout | n | F1 | vs held [95% CI] | all gold % | F1 where all gold (n) |\n|---|---:|---:|---:|---:|---:|")
    for layout in LAYOUTS:
        mine = got.get(layout)
        if not mine:
            continue
        ids = sorted(set(mine) & set(base))
        a = [mine[i]["f1"] for i in ids]
        b = [base[i]["f1"] for i in ids]
        low, high = paired_bootstrap(a, b) if layout != "held" else (0.0, 0.0)
        ag = [mine[i]["f1"] for i in ids if mine[i]["all_gold"]]
        print(f"| {layout} | {len(ids)} | {100 * sum(a) / len(a):.1f} | {100 * (sum(a) - sum(b)) / len(a):+.1f} "
              f"[{100 * low:+.1f}, {100 * high:+.1f}] | {100 * len(ag) / len(ids):.1f} | "
              f"{100 * sum(ag) / max(1, len(ag)):.1f} ({len(ag)}) |")


def main() -> None:
    if "--report" in sys.argv:
        for p in sys.argv[sys.argv.index("--report") + 1:]:
            report(Path(p))
        return
    ap = reader_args(argparse.ArgumentParser(), "qwen2.5-coder-0.5b")
    ap.add_argument("--rows", type=Path, required=True)
    ap.add_argument("--corpus", type=Path)
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--choice", choices=("compare", "links"), help="only the looks the question's form sent this way")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
