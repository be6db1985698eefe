"""An estimate, from the committed rows, of a fourth way for `sr-rag-choose`: read nothing more when no name of
the question or of its first passages resolves to an article (the trace's `linked_articles` is empty), instead of
filling the three slots with the question's next passages. Such a question's prompt is then SR-RAG's with three
passages, so its row stands in for the answer (exact for open questions; a choice question would also keep the
options rule, which SR-RAG's row lacks). `python results/choose/no_link_estimate.py` from the repository root
prints, per slice with both rows: the questions where no link resolved, F1 there with three passages and with
`sr-rag-choose`, and the estimate against `sr-rag-choose` and against the six-passage control (paired 95% CI)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import as_written  # noqa: E402
from active_rag.evaluation.compare import read_rows  # noqa: E402
from active_rag.evaluation.paired import paired_differences  # noqa: E402

M = "qwen2.5-coder-1.5b-mixed"
R = Path(__file__).resolve().parent.parent
SLICES = [("HotpotQA dev, union", "eval-union", "eval-union-budget", "hotpotqa"),
          ("HotpotQA dev-b, union", "eval-union", "eval-union-budget", "hotpotqa-dev-b"),
          ("2WikiMultihopQA, union", "eval-union", "eval-union-budget", "2wikimultihopqa"),
          ("HotpotQA dev, pool", "eval", "eval-budget", "hotpotqa"),
          ("HotpotQA dev-b, pool", "eval", "eval-budget", "hotpotqa-dev-b"),
          ("2WikiMultihopQA, pool", "eval", "eval-budget", "2wikimultihopqa"),
          ("StrategyQA, pool", "eval", "eval-budget", "strategyqa")]


def load(path):
    """The answered rows of ``path`` by question id; none while the file is not there yet."""
    return {r["id"]: as_written(r) for r in read_rows(path)} if path.is_file() else {}


def main():
    print("| Slice | n | no link resolves | F1 there: 3 passages / `sr-rag-choose` | estimate vs `sr-rag-choose` [95% CI] | vs control [95% CI] | retriever calls/q |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, folder, budget, ds in SLICES:
        once, choose = load(R / folder / ds / M / "sr-rag.jsonl"), load(R / folder / ds / M / "sr-rag-choose.jsonl")
        control = load(R / budget / ds / M / "sr-rag.jsonl")
        ids = [i for i in choose if i in once and i in control]
        if not ids or len(ids) < len(choose):
            continue  # a run still under way
        metric = "accuracy" if ds == "strategyqa" else "f1"
        none = {i for i in ids if not any(t.get("linked_articles") for t in choose[i]["trace"])}
        estimate = {i: (once if i in none else choose)[i] for i in ids}
        rows = {"estimate": list(estimate.values()), "choose": [choose[i] for i in ids], "control": [control[i] for i in ids]}
        vs_control = [d for d in paired_differences(rows, "control", [metric]) if d.method == "estimate"][0]
        vs_choose = [d for d in paired_differences(rows, "choose", [metric]) if d.method == "estimate"][0]
        mean = lambda src: 100 * sum(src[i]["metrics"][metric] for i in none) / len(none) if none else float("nan")
        calls = sum(estimate[i]["retriever_calls"] for i in ids) / len(ids)
        fmt = lambda d: f"{100 * d.difference:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]"
        print(f"| {name} | {len(ids)} | {len(none)} | {mean(once):.1f} / {mean(choose):.1f} | {fmt(vs_choose)} | "
              f"{fmt(vs_control)} | {calls:.2f} |")


if __name__ == "__main__":
    main()
