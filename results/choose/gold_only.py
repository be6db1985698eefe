"""Probe (not part of the engine): the reader with nothing but the gold paragraphs, to tell distraction from
difficulty in item 3.

Item 3 compares each method's F1 over its own questions whose prompt held every gold paragraph, so a preset that
holds all gold on harder questions than three passages do is measured on harder questions. This probe answers every
question with SR-RAG's reader (the same prompt, exemplars and stop rule) from a prompt that holds only the question's
gold paragraphs, in the dataset's order; ``--report`` then gives, per slice and method, on that method's own
all-gold questions, the method's F1, the gold-only F1 on the same questions, and the difference with its paired
95% interval: what the method's other passages cost the reader there (distraction), apart from how hard the
questions are; then that cost against three passages' on their own all-gold questions (questions resampled
together, as in `all_gold.py`). Both sides' answers are settled by the date rule where the method has it
(`dates.py`); the presets' "both" questions are scored by the reader's own answer, not by the each-name rule, which
asks the reader again and was not run on the gold-only prompt (so the presets' F1 here can be below `all_gold.py`'s).

    G=results/gold-only/qwen2.5-coder-1.5b-mixed
    python results/choose/gold_only.py --dataset hotpotqa --out $G/hotpotqa.jsonl     # and --dataset hotpotqa
        --split dev-b ($G/hotpotqa-dev-b.jsonl), --dataset 2wikimultihopqa; resumable
    python results/choose/gold_only.py --report     # --model=qwen2.5-coder-0.5b-mixed: that model's rows

The gold paragraphs are the shared pools' (their texts are the union's too, so one run serves the pool and union
slices with real titles; hidden-title slices are left out, their passages carry other titles).
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import M  # noqa: E402  the rows' model folder (--model=...)

R = Path(__file__).resolve().parent.parent
OUT = R / "gold-only" / M
FILES = {"HotpotQA dev": "hotpotqa", "HotpotQA dev-b": "hotpotqa-dev-b", "2WikiMultihopQA": "2wikimultihopqa"}


class Fixed:
    """A retriever that returns the passages chosen for the question it is asked with (here its gold paragraphs; SR-RAG
    asks once, with the question)."""

    def __init__(self, by_question):
        self.by_question = {" ".join(q.split()): gold for q, gold in by_question.items()}

    def retrieve(self, query, k):
        return list(self.by_question[" ".join(query.split())])  # the engine trims the question it is given


def run(args) -> None:
    import torch

    from active_rag.decoding.model import ActiveLM
    from active_rag.evaluation.config import EvalConfig, MethodSpec
    from active_rag.evaluation.datasets import corpus_path, load_dataset
    from active_rag.evaluation.method_engines import build_engine
    from active_rag.evaluation.scoring import score_example
    from active_rag.retrieval.bm25 import read_jsonl_passages

    torch.set_num_threads(args.threads)
    examples = [e for e in load_dataset(args.dataset, split=args.split) if e.gold_passage_ids]
    by_id = {p.id: p for p in read_jsonl_passages(corpus_path(args.dataset))}
    done = {json.loads(line)["id"] for line in args.out.open()} if args.out.exists() else set()
    todo = [e for e in examples if e.id not in done][: args.limit]
    gold = {e.question: [by_id[i] for i in e.gold_passage_ids] for e in examples}
    lm = ActiveLM.load(args.model, weights=args.weights)
    config = EvalConfig(dataset=args.dataset, top_k=max(len(g) for g in gold.values()))
    engine = build_engine(MethodSpec("sr-rag", preset="sr-rag"), lm, Fixed(gold), config)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(todo), args.batch_size):
        chunk = todo[start:start + args.batch_size]
        results = engine.run_batch([e.question for e in chunk], batch_size=args.batch_size)
        with args.out.open("a") as fh:
            for example, result in zip(chunk, results):
                answer, metrics = score_example(example, result)
                fh.write(json.dumps({"id": example.id, "question": example.question, "gold": example.answers,
                                     "prediction": result.answer, "answer": answer, "f1": metrics["f1"],
                                     "em": metrics["em"], "passage_ids": result.final_passage_ids}) + "\n")
        print(f"{len(done) + start + len(chunk)}/{len(examples)}", file=sys.stderr, flush=True)


def report() -> None:
    from table import SLICES, dataset_of, f
    from stop_estimate import rows
    from dates import scores
    from all_gold import interval
    from active_rag.evaluation.paired import paired_bootstrap

    methods = (("three passages", 2, "sr-rag", False), ("six passages", 1, "sr-rag", False),
               ("sr-rag-choose", 2, "sr-rag-choose", True), ("look-again-choose", 2, "look-again-choose", True))
    print("| Slice | Corpus | Method | all-gold n | F1 there | gold-only F1 there | distraction [95% CI] "
          "| vs three passages' distraction [95% CI] |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    incomplete = set()
    for name, corpus, titles, parts in SLICES:
        if titles != "real" or len(parts) > 1 or name not in FILES:
            continue
        path = OUT / f"{FILES[name]}.jsonl"
        if not path.is_file():
            continue
        dataset = dataset_of(name)
        alone = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
        three = None
        for label, folder, method, settled in methods:
            got = rows([f(parts[0][folder], parts[0][0], method)])
            if got is None:
                continue
            if not set(got) <= set(alone):  # a gold-only run still under way: its slice waits for it
                incomplete.add(path.name)
                break
            # each method's answer with the date rule where it has it, as the gold-only answer gets it; not the
            # each-name rule, which asks the reader again (the gold-only prompt was not asked again)
            mine = {i: (scores(r, dataset, each_name=False)[1 if settled else 0]
                        if r["metrics"].get("evidence_recall") == 1.0 else None) for i, r in got.items()}
            # what the method's prompt cost the reader on each of its all-gold questions: its F1 minus the gold-only
            # prompt's (the date rule applied to both where the method has it)
            cost = {i: (None if v is None else v - scores(alone[i], dataset)[1 if settled else 0])
                    for i, v in mine.items() if i in alone}
            ids = [i for i, c in cost.items() if c is not None]
            a = [mine[i] for i in ids]
            low, high = paired_bootstrap(a, [a_i - cost[i] for i, a_i in zip(ids, a)])
            d = sum(cost[i] for i in ids) / len(ids)
            versus = "-"
            if three is None:
                three = cost
            else:
                common = sorted(set(cost) & set(three))
                lo, hi = interval(common, cost, three)
                diff = d - sum(v for v in three.values() if v is not None) / sum(v is not None for v in three.values())
                versus = f"{100 * diff:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
            print(f"| {name} | {corpus} | {label} | {len(ids)} | {100 * sum(a) / len(ids):.1f} | "
                  f"{100 * (sum(a) / len(ids) - d):.1f} | {100 * d:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] | {versus} |")
    print("\n(gold-only rows: " + ", ".join(f"{p.name} {len(p.read_text().splitlines())}"
                                         + (" (under way: its slices are left out)" if p.name in incomplete else "")
                                         for p in sorted(OUT.glob("*.jsonl"))) + ")")


def main() -> None:
    if "--report" in sys.argv:
        report()
        return
    run(reader_args(argparse.ArgumentParser(), "qwen2.5-coder-1.5b").parse_args())


def reader_args(ap: argparse.ArgumentParser, model: str) -> argparse.ArgumentParser:
    """The options of a probe that answers with SR-RAG's reader (``--model`` with ``--weights``: what M names)."""
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--model", default=model)
    ap.add_argument("--weights", default="mixed")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--out", type=Path, required=True)
    return ap


if __name__ == "__main__":
    main()
