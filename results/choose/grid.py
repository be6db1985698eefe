"""The evidence grid from the committed rows: on each slice, SR-RAG with three passages, `sr-rag-linked`,
`sr-rag-choose` and `look-again-choose`, each paired against the six-passage control (`python results/choose/grid.py` from the repository
root; qwen2.5-coder-1.5b, `mixed` weights). Every cell of a slice covers the same questions: those the control and
every method with rows on that slice answered (`n`). A cell reads `F1 (difference [95% CI], retriever calls/q)`;
`-` where the method has no rows on that slice, `- (k of n run)` where its run has not reached every question yet."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import SLICES, M, R, cat, dataset_of, paired, bold  # noqa: E402
from active_rag.evaluation.compare import compare_rows  # noqa: E402

METHODS = [("SR-RAG, 3 passages", "sr-rag"), ("`sr-rag-linked`", "sr-rag-linked"), ("`sr-rag-choose`", "sr-rag-choose"),
           ("`look-again-choose`", "look-again-choose")]


def keep(path, ids):
    """``path`` cut to the questions in ``ids``."""
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines() if json.loads(line)["id"] in ids))


def main():
    out = ["| Slice | Corpus | Titles | n | control F1 | " + " | ".join(c for c, _ in METHODS) + " |",
           "|---|---|---|---:|---:|" + "---:|" * len(METHODS)]
    for name, corpus, titles, parts in SLICES:
        control = cat([R / b / ds / M / "sr-rag.jsonl" for ds, b, _ in parts])
        files = {m: cat([R / c / ds / M / f"{m}.jsonl" for ds, _, c in parts]) for _, m in METHODS}
        files = {m: p for m, p in files.items() if p is not None}
        if control is None or not files:
            continue
        total = len(paired(control))
        partial = {m: len(paired(p)) for m, p in files.items() if len(paired(control, p)) < total}
        files = {m: p for m, p in files.items() if m not in partial}  # a run still under way: not paired yet
        if not files:
            continue
        ids = paired(control, *files.values())
        for path in (control, *files.values()):
            keep(path, ids)
        dataset = dataset_of(name)
        summary, diffs = compare_rows({"control": control, **files}, ["control"], dataset)
        by = {d.method: d for d in diffs}
        cells = []
        for _, m in METHODS:
            if m not in files:
                cells.append(f"- ({partial[m]} of {total} run)" if m in partial else "-")
                continue
            d, calls = by[m], summary[m].get("retriever_calls_per_question")
            cells.append(f"{100 * d.method_mean:.1f} ({bold(d)} [{100 * d.low:+.1f}, {100 * d.high:+.1f}], "
                         f"{'-' if calls is None else f'{calls:.2f}'})")
        out.append(f"| {name} | {corpus} | {titles} | {len(ids)} | {100 * diffs[0].baseline_mean:.1f} | "
                   + " | ".join(cells) + " |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
