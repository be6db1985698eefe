"""Item 3 with its uncertainty: F1 on the questions whose prompt held every gold paragraph, each preset against
retrieving once with three passages (SR-RAG as the papers run it, without the date rule), from the committed rows:
`python results/choose/all_gold.py` from the repository root (qwen2.5-coder-1.5b, `mixed` weights).

The two means are over different questions: each method's own questions whose prompt held all gold. SR-RAG's are the
questions its three passages already answer (the easy ones); a preset that reads more holds all gold on harder
questions too. So the table gives, per slice:

- the measure itself, each side's n and F1, and the bootstrap interval of the difference: questions are resampled
  (1000 times, seed 0), and in each resample each side's mean is taken over its own all-gold questions;
- the same paired over the questions where both prompts held all gold (a subset of SR-RAG's, since every preset's
  prompt holds the first three passages).

A slice's row uses the preset's own run; `look-again-choose` on union HotpotQA dev was estimated before its own run
(`stop_estimate.py`) and is left out where its rows do not exist. The presets' scores are the settled answers
(`dates.py`); SR-RAG's are its reader's answers.

`--ceiling`: what no test of the draft can beat. For `look-again-choose`, the measure again if every question whose
three passages already held all gold kept its draft instead of looking again (a test that knew which questions three
passages answer), and if each of those kept the better of its two answers (a selector that knew the gold). The
drafts are scored by the reader's span (the rows keep a draft's span, not its text, so the date rule is not applied
to it), then what keeping the draft would gain on the questions the check sent on, by what is known before the
look. `--yes-no`: the preset's "yes" answers to yes/no questions. `METHOD` arguments (e.g.
`look-again-choose@context=read-links_beside=0`) add rows of other runs.
"""
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the repository root: research/
from table import SLICES, M, R, dataset_of  # noqa: E402
from stop_estimate import rows  # noqa: E402
from dates import mean, scores  # noqa: E402
from research.answer_check_sweep import answer_score  # noqa: E402
from active_rag.evaluation.paired import paired_bootstrap  # noqa: E402

PRESETS = ("sr-rag-choose", "look-again-choose", *(a for a in sys.argv[1:] if not a.startswith("--")))
CEILING = "--ceiling" in sys.argv
RESAMPLES = 1000


def interval(ids, mine, base, resamples=RESAMPLES, seed=0):
    """The 95% percentile-bootstrap interval of mean(mine over its own questions) - mean(base over its own), with
    questions (``ids``) resampled together: ``mine`` and ``base`` map an id to its F1, or None when that side's prompt
    did not hold all gold."""
    rng = random.Random(seed)
    diffs = []
    for _ in range(resamples):
        draw = rng.choices(ids, k=len(ids))
        a = [mine[i] for i in draw if mine[i] is not None]
        b = [base[i] for i in draw if base[i] is not None]
        if a and b:
            diffs.append(sum(a) / len(a) - sum(b) / len(b))
    diffs.sort()
    return diffs[math.floor(0.025 * (len(diffs) - 1))], diffs[math.ceil(0.975 * (len(diffs) - 1))]  # as bootstrap_ci


def paired(ids, mine, base):
    """Mean difference and its paired-bootstrap interval over the questions where both prompts held all gold
    (n, diff, low, high)."""
    both = [i for i in ids if mine[i] is not None and base[i] is not None]
    if len(both) < 2:
        return len(both), float("nan"), float("nan"), float("nan")
    a, b = [mine[i] for i in both], [base[i] for i in both]
    low, high = paired_bootstrap(a, b, resamples=RESAMPLES)
    return len(both), (sum(a) - sum(b)) / len(both), low, high


def held(rows_by_id, dataset, settled):
    """Question id -> F1 when the prompt held every gold paragraph, else None (``settled``: the date rule's answer)."""
    return {i: (scores(r, dataset)[1 if settled else 0] if r["metrics"].get("evidence_recall") == 1.0 else None)
            for i, r in rows_by_id.items()}


def ceiling(got, ids, dataset, mine, base):
    """The measure if every question three passages answered with all gold kept its draft, and if each kept the
    better of its two answers: (n of such questions that looked again, F1 kept draft, F1 better of two)."""
    drafts, better, n = dict(mine), dict(mine), 0
    for i in ids:
        check = got[i].get("answer_check") or {}
        if base[i] is None or mine[i] is None or not check.get("fired") or not check.get("second"):
            continue
        n += 1
        drafts[i] = answer_score(check["draft"]["answer"], got[i]["gold"], dataset)
        better[i] = max(drafts[i], mine[i])
    def avg(d): return 100 * mean([v for v in d.values() if v is not None])
    return n, avg(drafts), avg(better)


def preset_slices():
    """(slice name, corpus, titles, dataset, rows by id) of `look-again-choose` on each F1 slice of one part (a slice of
    two parts repeats its parts' questions; StrategyQA is scored by accuracy)."""
    for name, corpus, titles, parts in SLICES:
        dataset = dataset_of(name)
        if dataset != "strategyqa" and len(parts) == 1:
            yield name, corpus, titles, dataset, rows([R / parts[0][2] / parts[0][0] / M / "look-again-choose.jsonl"]) or {}


def stand_buckets():
    """On every question the check sent on (the F1 slices), the F1 keeping the draft would gain over the second
    answer, by the draft's weakest-token probability, by the way the question reads, and by the articles its look
    found: what any test of the draft could stand on."""
    from active_rag.answer.read_choice import choose_reading

    sent = []
    for _, _, _, dataset, got in preset_slices():
        for r in got.values():
            check = r.get("answer_check") or {}
            if not check.get("fired") or not check.get("second") or len(r["trace"]) < 2:
                continue
            look = r["trace"][1]
            articles = [i for i in look.get("new_ids", []) if i in (look.get("linked_articles") or {})]
            gain = answer_score(check["draft"]["answer"], r["gold"], dataset) - r["metrics"]["f1"]
            sent.append((gain, min(int(check["draft"]["min_prob"] * 10), 9) / 10, choose_reading(r["question"]).way,
                          len(articles)))
    print(f"\nKeeping the draft instead of the second answer, on the {len(sent)} questions the check sent on: "
          f"{100 * mean([g for g, *_ in sent]):+.1f} F1 a question")
    for label, at in (("the draft's weakest-token p, from", 1), ("the way the question reads", 2), ("articles the look found", 3)):
        groups = {}
        for row in sent:
            groups.setdefault(row[at], []).append(row[0])
        print(f"- by {label}: " + ", ".join(f"{k}: {100 * mean(v):+.1f} ({len(v)})" for k, v in sorted(groups.items())))


def main():
    if CEILING:
        print("| Slice | Corpus | Titles | SR-RAG 3: n, F1 | preset: n, F1 | looked again though three held all gold | "
              "every such draft kept | the better of its two answers |")
        print("|---|---|---|---:|---:|---:|---:|---:|")
    else:
        print("| Slice | Corpus | Titles | Preset | preset: n, F1 | SR-RAG 3: n, F1 | difference [95% CI] "
          "| both held: n, difference [95% CI] |")
        print("|---|---|---|---|---:|---:|---:|---:|")
    for name, corpus, titles, parts in SLICES:
        dataset = dataset_of(name)
        if dataset == "strategyqa":
            continue  # accuracy, not F1; dates.py --all-gold gives it
        three = rows([R / part[2] / part[0] / M / "sr-rag.jsonl" for part in parts])
        if three is None:
            continue
        for preset in ("look-again-choose",) if CEILING else PRESETS:
            got = rows([R / part[2] / part[0] / M / f"{preset}.jsonl" for part in parts])
            if got is None:
                continue
            ids = sorted(set(got) & set(three))
            mine = held({i: got[i] for i in ids}, dataset, True)
            base = held({i: three[i] for i in ids}, dataset, False)
            a = [v for v in mine.values() if v is not None]
            b = [v for v in base.values() if v is not None]
            if len(a) < 2 or len(b) < 2:
                continue  # a run too short to say anything
            if CEILING:
                n, kept, best = ceiling(got, ids, dataset, mine, base)
                print(f"| {name} | {corpus} | {titles} | {len(b)}, {100 * mean(b):.1f} | {len(a)}, {100 * mean(a):.1f} | "
                      f"{n} | {kept:.1f} | {best:.1f} |")
                continue
            diff = sum(a) / len(a) - sum(b) / len(b)
            low, high = interval(ids, mine, base)
            n, pd, pl, ph = paired(ids, mine, base)
            print(f"| {name} | {corpus} | {titles} | {preset} | {len(a)}, {100 * sum(a) / len(a):.1f} | "
                  f"{len(b)}, {100 * sum(b) / len(b):.1f} | {100 * diff:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] | "
                  f"{n}, {100 * pd:+.1f} [{100 * pl:+.1f}, {100 * ph:+.1f}] |")


def yes_no():
    """``--yes-no``: how often the preset's reader answers "yes" to the yes/no questions of each slice, against how
    many are "yes", and the weakest-token probability of its "yes" answers by whether they were right."""
    print("| Slice | Corpus | Titles | yes/no questions | gold yes | answered yes | right | p of a right yes | p of a wrong yes |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for name, corpus, titles, _, got in preset_slices():
        asked = [r for r in got.values() if str(r["gold"][0]).lower() in ("yes", "no")]
        if not asked:
            continue
        said = [(r, r["answer_check"]["second" if r["answer_check"].get("kept") == "second" else "draft"]) for r in asked]
        yes = [(r, c) for r, c in said if (c["answer"] or "").lower().startswith("yes")]
        ps = {ok: [c["min_prob"] for r, c in yes if (str(r["gold"][0]).lower() == "yes") == ok] for ok in (True, False)}
        span = {ok: f"{min(v):.2f}-{max(v):.2f}" if v else "-" for ok, v in ps.items()}
        print(f"| {name} | {corpus} | {titles} | {len(asked)} | {sum(str(r['gold'][0]).lower() == 'yes' for r in asked)} | "
              f"{len(yes)} | {sum(r['metrics']['f1'] == 1.0 for r in asked)} | {span[True]} | {span[False]} |")


if __name__ == "__main__":
    if "--yes-no" in sys.argv:
        yes_no()
        sys.exit()
    main()
    if CEILING:
        stand_buckets()
