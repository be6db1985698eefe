"""Probe (not part of the engine): does the reader answer "Are both A and B P?" better name by name?

For each committed row of a method whose question asks whether two names both have a property, the reader is asked
"Is A P?" and "Is B P?" with the passages the row's final prompt held (in its order, SR-RAG's prompt), and the
question, when the row answered it "yes", is settled as ``AnswerStage(each_name=True)`` settles it
(:mod:`active_rag.answer.both_names`). Writes one JSON line a question to ``--out``:

    python results/choose/probe_both.py ROWS.jsonl --dataset hotpotqa [--data-dir /tmp/union] [--hide-titles] \
        --out results/probe-both/....jsonl
"""
import argparse
import json
import sys
from pathlib import Path

from active_rag.evaluation.config import EvalConfig, MethodSpec
from active_rag.evaluation.datasets import corpus_path
from active_rag.evaluation.method_engines import build_engine, hidden_titles
from active_rag.evaluation.metrics import qa_scores
from active_rag.answer.both_names import both_question, settle_both, yes_or_no
from active_rag.retrieval.bm25 import read_jsonl_passages


class Fixed:
    def __init__(self, passages):
        self.passages = passages

    def retrieve(self, query, k):
        return list(self.passages[:k])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--data-dir", type=Path)
    ap.add_argument("--hide-titles", action="store_true")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--weights", default="mixed")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import torch

    from active_rag.decoding.model import ActiveLM

    torch.set_num_threads(2)

    passages = read_jsonl_passages(corpus_path(args.dataset, args.data_dir))
    if args.hide_titles:
        passages = hidden_titles(passages)
    by_id = {p.id: p for p in passages}
    lm = ActiveLM.load(args.model, weights=args.weights)
    done = set()
    if args.out.exists():
        done = {json.loads(line)["id"] for line in args.out.open()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for line in open(args.rows):
        row = json.loads(line)
        parsed = both_question(row["question"])
        if parsed is None or row["id"] in done or yes_or_no(row["prediction"]) != "yes":
            continue
        held = [by_id[i] for i in row["final_passage_ids"]]
        config = EvalConfig(dataset=args.dataset, top_k=len(held))
        engine = build_engine(MethodSpec("sr-rag", preset="sr-rag"), lm, Fixed(held), config)
        answers = []
        for sub in parsed.questions:
            result = engine.run(sub)
            answers.append({"question": sub, "answer": result.answer, "verdict": yes_or_no(result.answer)})
        verdicts = [a["verdict"] for a in answers]
        settled = settle_both(verdicts)
        pred = row["prediction"]
        out = {"id": row["id"], "question": row["question"], "gold": row["gold"], "prediction": pred,
               "f1": row["metrics"]["f1"], "evidence_recall": row["metrics"].get("evidence_recall"),
               "names": parsed.names, "predicate": parsed.predicate, "answers": answers, "settled": settled,
               "settled_f1": qa_scores(settled, row["gold"])["f1"] if settled else row["metrics"]["f1"]}
        with args.out.open("a") as fh:
            fh.write(json.dumps(out) + "\n")
        print(row["question"], "|", row["gold"], pred, "->", settled, verdicts, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
