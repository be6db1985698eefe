"""When to read nothing more: `look-again-choose`'s theta, estimated from the committed rows
(`python results/choose/stop_estimate.py` from the repository root; qwen2.5-coder-1.5b, `mixed` weights).

`look-again-choose` answers from the question's three passages (the draft) and, when an answer token has probability
below theta, reads what `sr-rag-choose` reads and answers again, keeping the second answer. Its second prompt is
`sr-rag-choose`'s prompt, so its second answer is `sr-rag-choose`'s (where a run of the preset itself and the drafts
both exist, the script counts the questions where the run's answer is not the estimate's). The rows `look-again-choose@check_theta=0` hold every draft and its confidence
(theta 0 never looks again); any theta then follows without the model: a draft whose weakest answer token has
p >= theta stands, with one retriever call and the draft's prompt tokens; any other question scores as
`sr-rag-choose` did, and costs the draft and its look.

Rules: `min` (FLARE's test on the answer span); `min+grounded` (`min`, and the draft's answer is found in its three
passages: `AnswerCheck(ground_draft=True)`; a "yes" or "no" as `min`). The passages' texts come from the union in
`/tmp/union` (`python3 ../shared/tools/build_union_corpus.py`) and the shared pools. theta is chosen on
HotpotQA dev + dev-b over the union (`CHOOSE_ON`; `--sweep` prints every rule and theta there); the last table
reports it on every slice, from the preset's own rows where they exist. `--held-comparison` estimates one more
rule on every slice (`AnswerCheck(held_comparison_stands=True)`; with `--any-question`, for every question whose
look finds no article). The drafts' rows were written before the presets
settled comparisons of dates; the script settles them as the preset does (`settle_row`), except with
`--without-dates`.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the repository root: research/
from table import SLICES, M, R, WITHOUT_DATES, as_written, dataset_of  # noqa: E402
from active_rag.evaluation.settled import settle_row  # noqa: E402
from active_rag.evaluation.paired import paired_differences  # noqa: E402
from research.answer_check_sweep import confidence  # noqa: E402
from active_rag.evaluation.datasets import corpus_path  # noqa: E402
from active_rag.answer.check import AnswerCheck  # noqa: E402
from active_rag.components.presets import PRESETS  # noqa: E402

DRAFT = "look-again-choose@check_theta=0"
PRESET = "look-again-choose"
THETAS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 1.0)
RULES = ("min", "min+grounded")
CORPORA = [corpus_path(d, "/tmp/union") for d in ("hotpotqa", "2wikimultihopqa")] + [
    corpus_path(d) for d in ("hotpotqa", "2wikimultihopqa", "strategyqa")]  # the pools: $ACTIVE_RAG_DATA or ../shared/data
_TEXTS = {}


def texts():
    """Passage id -> title and text, from the union (``/tmp/union``) and the shared pools: what min+grounded reads."""
    if not _TEXTS:
        for path in CORPORA:
            if path.is_file():
                for line in path.read_text().splitlines():
                    if line.strip():
                        p = json.loads(line)
                        _TEXTS.setdefault(p["id"], f"{p.get('title', '')}\n{p['text']}")
    return _TEXTS
CHOOSE_ON = ("HotpotQA dev + dev-b", "union", "real")
ANY_QUESTION = "--any-question" in sys.argv


def rows(paths):
    """Rows by question id from ``paths`` (None when one is missing)."""
    out = {}
    for p in paths:
        if not p.is_file():
            return None
        for line in p.read_text().splitlines():
            if line.strip():
                r = as_written(json.loads(line))
                out[r["id"]] = r
    return out


def stands(draft_row, theta, rule):
    """Whether the draft stands (nothing more is read) under ``theta`` and ``rule``: the engine's own test
    (``AnswerCheck.unsure``), with ``ground_draft`` for ``min+grounded``."""
    check = AnswerCheck(theta=theta, select="second", query="choose", ground_draft=rule == "min+grounded")
    held = "\n".join(texts()[i] for i in draft_row["final_passage_ids"]) if check.ground_draft else None
    return not check.unsure(confidence(draft_row["answer_check"]["draft"]), held)


def estimate(draft, choose, theta, rule, metric):
    """Synthetic rows of the rule: the draft's score and cost where it stands, else sr-rag-choose's."""
    out = []
    for qid, d in draft.items():
        c = choose[qid]
        keep = stands(d, theta, rule)
        read = d["prompt_tokens"]["read"] + (0 if keep else c["prompt_tokens"]["read"])
        calls = d["retriever_calls"] + (0 if keep else c["retriever_calls"] - 1)
        out.append({"id": qid, "metrics": {metric: (d if keep else c)["metrics"][metric]}, "stood": keep,
                    "read": read, "calls": calls, "all_gold": (d if keep else c)["metrics"].get("evidence_recall") == 1.0})
    return out


def slice_rows(parts):
    """The rows of a slice by kind, over the questions every kind with rows answered: ``draft`` (theta 0),
    ``preset`` (a run of ``look-again-choose`` itself) and ``three`` where they exist; ``choose`` and ``control``
    always (else None)."""
    files = {"draft": [R / c / ds / M / f"{DRAFT}.jsonl" for ds, _, c in parts],
             "preset": [R / c / ds / M / f"{PRESET}.jsonl" for ds, _, c in parts],
             "choose": [R / c / ds / M / "sr-rag-choose.jsonl" for ds, _, c in parts],
             "three": [R / c / ds / M / "sr-rag.jsonl" for ds, _, c in parts],
             "control": [R / b / ds / M / "sr-rag.jsonl" for ds, b, _ in parts]}
    got = {k: rows(v) for k, v in files.items()}
    if got["draft"] is not None and not WITHOUT_DATES:  # written before the rule (and before ground_draft): settled here
        got["draft"] = {i: settle_row(r, r["engine_key"]) for i, r in got["draft"].items()}
    if any(got[k] is None for k in ("choose", "control")) or (got["draft"] is None and got["preset"] is None):
        return None
    got = {k: v for k, v in got.items() if v is not None}
    ids = sorted(set.intersection(*(set(v) for v in got.values())))  # sorted: the bootstrap draws the same questions
    if len(ids) < 2:
        return None
    return {k: {i: v[i] for i in ids} for k, v in got.items()}


def diff(mine, base, metric):
    d = paired_differences({"m": mine, "b": base}, "b", [metric])[0]
    text = f"{100 * d.difference:+.1f}"
    bold = d.low > 0 or d.high < 0
    return f"{'**' if bold else ''}{text}{'**' if bold else ''} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]"


def when_three_suffice(est, got, metric):
    """F1 on the questions whose three passages already held every gold paragraph: three passages / the rule /
    sr-rag-choose (n)."""
    if "three" not in got:
        return "-"
    ids = [i for i, r in got["three"].items() if r["metrics"].get("evidence_recall") == 1.0]
    by_id = {r["id"]: r for r in est}
    cols = [mean([got["three"][i]["metrics"][metric] for i in ids]), mean([by_id[i]["metrics"][metric] for i in ids]),
            mean([got["choose"][i]["metrics"][metric] for i in ids])]
    return " / ".join(f"{100 * c:.1f}" for c in cols) + f" ({len(ids)})"


def all_gold(est, got, metric):
    """Item 3: F1 on the questions whose final prompt held every gold paragraph, each method on its own such
    questions: three passages / the preset (the share of questions in brackets)."""
    if "three" not in got:
        mine = [r["metrics"][metric] for r in est if r["all_gold"]]
        return f"- / {100 * mean(mine):.1f} ({100 * len(mine) / len(est):.0f}%)"
    three = [r["metrics"][metric] for r in got["three"].values() if r["metrics"].get("evidence_recall") == 1.0]
    mine = [r["metrics"][metric] for r in est if r["all_gold"]]
    return (f"{100 * mean(three):.1f} ({100 * len(three) / len(got['three']):.0f}%) / "
            f"{100 * mean(mine):.1f} ({100 * len(mine) / len(est):.0f}%)")


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def run_rows(preset, metric):
    """A run's rows in the estimate's shape: whether the draft stood, the score, retriever calls, prompt tokens."""
    return [{"id": i, "metrics": {metric: r["metrics"][metric]}, "stood": not r["answer_check"]["fired"],
             "read": r["prompt_tokens"]["read"], "calls": r["retriever_calls"], "s": r.get("amortized_s") or r["wall_time_s"],
             "all_gold": r["metrics"].get("evidence_recall") == 1.0}
            for i, r in preset.items()]


def main():
    sweep = "--sweep" in sys.argv
    chosen = {}
    lines = []
    for name, corpus, titles, parts in SLICES:
        got = slice_rows(parts)
        if got is None:
            continue
        metric = "accuracy" if dataset_of(name) == "strategyqa" else "f1"
        lines.append((name, corpus, titles, got, metric))
        if "draft" not in got:
            continue
        score = {k: 100 * mean([r["metrics"][metric] for r in v.values()]) for k, v in got.items()}
        best = None
        table = [f"\n### {name}, {corpus}, titles {titles} (n={len(got['draft'])}): three passages {score['three']:.1f}, "
                 f"draft (three, options) {score['draft']:.1f}, sr-rag-choose {score['choose']:.1f}, "
                 f"control {score['control']:.1f}",
                 "| rule | theta | F1 | stood % | vs sr-rag-choose | vs control | vs three passages | calls/q | prompt tokens/q |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for rule in RULES:
            for theta in THETAS:
                est = estimate(got["draft"], got["choose"], theta, rule, metric)
                f1 = 100 * mean([r["metrics"][metric] for r in est])
                if (name, corpus, titles) == CHOOSE_ON and (best is None or f1 > best[0] + 1e-9):
                    best = (f1, rule, theta)
                table.append(f"| {rule} | {theta:g} | {f1:.1f} | {100 * mean([r['stood'] for r in est]):.0f} | "
                             f"{diff(est, list(got['choose'].values()), metric)} | {diff(est, list(got['control'].values()), metric)} | "
                             f"{diff(est, list(got['three'].values()), metric)} | {mean([r['calls'] for r in est]):.2f} | "
                             f"{mean([r['read'] for r in est]):.0f} |")
        if best is not None:
            chosen = {"rule": best[1], "theta": best[2]}
        if sweep:
            print("\n".join(table))
    print(f"\nChosen on {' '.join(CHOOSE_ON)}: {chosen}")
    if not chosen:
        return
    check = PRESETS[PRESET].answer.check
    if (check.theta, check.ground_draft) != (chosen["theta"], chosen["rule"] == "min+grounded"):
        print(f"the preset's check is theta={check.theta}, ground_draft={check.ground_draft}: not the rule these rows "
              "choose (the preset's was chosen --without-dates); the table below estimates the preset's")
    chosen = {"theta": check.theta, "rule": "min+grounded" if check.ground_draft else "min"}
    print("\nsource: `run`, the preset's own rows; `estimate`, the drafts and sr-rag-choose's rows (see the docstring)\n")
    print("| Slice | Corpus | Titles | source | n | stood % | F1 | vs control [95% CI] | vs sr-rag-choose | vs three passages | "
          "calls/q | prompt tokens/q (sr-rag-choose) | s/q (sr-rag-choose) | F1 where three suffice: three / preset / sr-rag-choose (n) "
          "| F1 when all gold: three / preset |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    mismatches = []
    for name, corpus, titles, got, metric in lines:
        if "preset" in got:
            est, source = run_rows(got["preset"], metric), "run"
            if "draft" in got:  # both: how often the estimate's answer is not the run's
                guess = estimate(got["draft"], got["choose"], chosen["theta"], chosen["rule"], metric)
                mismatches.append((name, corpus, titles, sum(
                    (got["draft"] if g["stood"] else got["choose"])[g["id"]]["answer"] != got["preset"][g["id"]]["answer"]
                    for g in guess), len(guess)))
        else:
            est, source = estimate(got["draft"], got["choose"], chosen["theta"], chosen["rule"], metric), "estimate"
        read_choose = mean([r["prompt_tokens"]["read"] for r in got["choose"].values()])
        s_choose = mean([r.get("amortized_s") or r["wall_time_s"] for r in got["choose"].values()])
        seconds = f"{mean([r['s'] for r in est]):.1f}" if source == "run" else "-"
        print(f"| {name} | {corpus} | {titles} | {source} | {len(est)} | {100 * mean([r['stood'] for r in est]):.0f} | "
              f"{100 * mean([r['metrics'][metric] for r in est]):.1f} | {diff(est, list(got['control'].values()), metric)} | "
              f"{diff(est, list(got['choose'].values()), metric)} | "
              f"{diff(est, list(got['three'].values()), metric) if 'three' in got else '-'} | "
              f"{mean([r['calls'] for r in est]):.2f} | {mean([r['read'] for r in est]):.0f} ({read_choose:.0f}) | "
              f"{seconds} ({s_choose:.1f}) | {when_three_suffice(est, got, metric)} | {all_gold(est, got, metric)} |")
    for name, corpus, titles, bad, n in mismatches:
        print(f"\n{name}, {corpus}, titles {titles}: the run's answer differs from the estimate's on {bad} of {n} questions")


def held_comparison():
    """``AnswerCheck(held_comparison_stands=True)`` estimated on every slice: an unsure draft of a comparison whose
    look would find no article (``sr-rag-choose``'s look found none: its trace's ``linked_articles``) stands. On the
    slices with the preset's own rows, its decisions and its draft (scored from the record) stand in for the
    drafts. ``--any-question``: the same for every question, not only comparisons (no rule of the engine)."""
    from research.answer_check_sweep import answer_score
    from active_rag.answer.read_choice import choose_reading

    print("| Slice | Corpus | Titles | n | base F1 | with it | stood % | difference [95% CI] |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name, corpus, titles, parts in SLICES:
        got = slice_rows(parts)
        if got is None:
            continue
        metric = "accuracy" if dataset_of(name) == "strategyqa" else "f1"
        base, mine = [], []
        for qid, c in got["choose"].items():
            if "preset" in got:
                p = got["preset"][qid]
                stood = not p["answer_check"]["fired"]
                score = answer_score(p["answer_check"]["draft"]["answer"], p["gold"], dataset_of(name))
                looked = p["metrics"][metric]
            else:
                stood = stands(got["draft"][qid], PRESETS[PRESET].answer.check.theta, "min+grounded")
                score, looked = got["draft"][qid]["metrics"][metric], c["metrics"][metric]
            articles = c["trace"][1].get("linked_articles", {}) if len(c["trace"]) > 1 else {}
            held = stood or ((ANY_QUESTION or choose_reading(c["question"]).way == "compare") and not articles)
            base.append({"id": qid, "metrics": {metric: score if stood else looked}})
            mine.append({"id": qid, "metrics": {metric: score if held else looked}, "stood": held})
        print(f"| {name} | {corpus} | {titles} | {len(base)} | {100 * mean([r['metrics'][metric] for r in base]):.1f} | "
              f"{100 * mean([r['metrics'][metric] for r in mine]):.1f} | {100 * mean([r['stood'] for r in mine]):.0f} | "
              f"{diff(mine, base, metric)} |")


if __name__ == "__main__":
    held_comparison() if "--held-comparison" in sys.argv else main()
