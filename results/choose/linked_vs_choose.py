"""Where `sr-rag-choose`'s lead over `sr-rag-linked` comes from, on every slice both have rows for
(`python results/choose/linked_vs_choose.py` from the repository root; qwen2.5-coder-1.5b, `mixed` weights).

`sr-rag-choose` differs from `sr-rag-linked` in what it reads (a comparison of named things reads their own
articles, an open question follows the links as `sr-rag-linked` does) and in its answer rules (dates settled,
"both" questions asked name by name). The rules read only the question and the text the reader wrote, or ask the
reader again, so every row gives the reader's own answer beside the final one (`dates.scores`). Over the questions
both answered, the table splits the difference into:

- **reading**: `sr-rag-choose`'s reader's own answer against `sr-rag-linked`'s (what choosing what to read adds);
- **dates**: what settling dates adds to that reader's answer;
- **each name**: what asking each name of a "both" question adds on top;

and gives `sr-rag-linked` with the date rule applied to its own rows ("linked, dates settled"), which is what
the links and the date rule give without the per-question choice. StrategyQA's yes/no questions have no rule to
apply: there the whole difference is reading. Differences are paired 95% bootstrap intervals. The last
columns are each preset's retriever calls a question, the share of questions whose final prompt held every gold
paragraph, and its F1 (final answers) on those questions (`sr-rag-linked` / `sr-rag-choose`).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import SLICES, M, R, bold, dataset_of  # noqa: E402
from stop_estimate import rows  # noqa: E402
from dates import scores  # noqa: E402
from active_rag.evaluation.paired import paired_differences  # noqa: E402


def cell(new, old, ids):
    """``new`` against ``old`` (score by id) over ``ids``: the paired difference and its interval."""
    d = paired_differences({"new": [{"id": i, "metrics": {"f1": new[i]}} for i in ids],
                            "old": [{"id": i, "metrics": {"f1": old[i]}} for i in ids]}, "old", ["f1"])[0]
    return f"{bold(d)} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]"


def mean(scores_by_id, ids):
    return 100 * sum(scores_by_id[i] for i in ids) / len(ids)


def held(got, final, ids):
    """Retriever calls a question, the share of ``ids`` whose final prompt held every gold paragraph, and the F1
    (``final``, by id) on those."""
    calls = sum(got[i].get("retriever_calls") or 0 for i in ids) / len(ids)
    where = [i for i in ids if got[i]["metrics"].get("evidence_recall") == 1.0]
    f1 = f"{mean(final, where):.1f}" if where else "-"
    return calls, 100 * len(where) / len(ids), f1


def main():
    print("| Slice | Corpus | Titles | n | `sr-rag-linked` | linked, dates settled | `sr-rag-choose` | choose vs linked "
          "[95% CI] | reading | dates | each name | calls/q | all gold % | F1 when all gold |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, corpus, titles, parts in SLICES:
        dataset = dataset_of(name)
        linked = rows([R / part[2] / part[0] / M / "sr-rag-linked.jsonl" for part in parts])
        choose = rows([R / part[2] / part[0] / M / "sr-rag-choose.jsonl" for part in parts])
        if linked is None or choose is None:
            continue
        ids = sorted(set(linked) & set(choose))
        if len(ids) < len(choose):
            print(f"| {name} | {corpus} | {titles} | {len(ids)} of {len(choose)} run | | | | | | | | | | |")
            continue
        l_own, l_dates = ({i: scores(linked[i], dataset, each_name=False)[k] for i in ids} for k in (0, 1))
        c_own, c_dates = ({i: scores(choose[i], dataset, each_name=False)[k] for i in ids} for k in (0, 1))
        c_final = {i: scores(choose[i], dataset)[1] for i in ids}
        (lc, lg, lf), (cc, cg, cf) = held(linked, l_own, ids), held(choose, c_final, ids)
        cost = f"{lc:.2f} / {cc:.2f} | {lg:.1f} / {cg:.1f} | {lf} / {cf}"
        if dataset == "strategyqa":  # no answer rule applies: the whole difference is reading
            total = cell(c_final, l_own, ids)
            print(f"| {name} | {corpus} | {titles} | {len(ids)} | {mean(l_own, ids):.1f} | - | {mean(c_final, ids):.1f} | "
                  f"{total} | {total} | - | - | {cost} |")
            continue
        print(f"| {name} | {corpus} | {titles} | {len(ids)} | {mean(l_own, ids):.1f} | {mean(l_dates, ids):.1f} | "
              f"{mean(c_final, ids):.1f} | {cell(c_final, l_own, ids)} | {cell(c_own, l_own, ids)} | "
              f"{cell(c_dates, c_own, ids)} | {cell(c_final, c_dates, ids)} | {cost} |")


if __name__ == "__main__":
    main()
