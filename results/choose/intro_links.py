"""Which committed rows the name index's reading of introductions could change: `python results/choose/intro_links.py`
from the repository root (no model; the rows of `sr-rag-choose` and `look-again-choose`, both models).

Version 3 of the name index (active_rag.retrieval.name_index) no longer reads the name in a text's short introduction
as what the text is about ("In the United Kingdom, the Accession Council is ..." is about the Accession Council, not
the United Kingdom). A row's look changes where the articles it reads differ under the two versions. This script
rebuilds both indexes for every corpus (the pools, the union, the union with hidden titles), checks every look in the
rows with linked retrieval's own ranking under each version (the names followed and their articles, the first
``top_k``), and prints per slice how many questions' looks would read other articles: the rows the change makes
stale. `git show 93e9237:active_rag/retrieval/name_index.py` is the version before (written to a temporary module).
`--set-aside` moves those rows to `other-settings/<method>.<engine key>-name-index-v2.jsonl`, so that resuming the
eval answers those questions again with the new index; `--compare` then prints, per slice, those questions' F1
before and after and the slice's F1 before and after. `--model=NAME` (repeatable) limits it to those models' rows:
set aside each model's rows once, since rows answered again under version 3 still read other articles under
version 2 and a second `--set-aside` would overwrite the version-2 rows kept before.
"""
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from active_rag.answer import links as linked
from active_rag.retrieval import name_index as new_ni
from active_rag.retrieval.bm25 import read_jsonl_passages
from active_rag.evaluation.method_engines import corpus_path, hidden_titles
from active_rag.evaluation.store import OTHER_SETTINGS_DIR, read_rows_file, write_rows_file

R = Path(__file__).resolve().parent.parent.parent
SET_ASIDE = "--set-aside" in sys.argv
OLD_COMMIT = "93e9237"
SLICES = [  # (rows folder, dataset folder, dataset, data dir, hidden titles)
    ("eval", "hotpotqa", "hotpotqa", None, False), ("eval", "hotpotqa-dev-b", "hotpotqa", None, False),
    ("eval", "2wikimultihopqa", "2wikimultihopqa", None, False),
    ("eval-union", "hotpotqa", "hotpotqa", "/tmp/union", False), ("eval-union", "hotpotqa-dev-b", "hotpotqa", "/tmp/union", False),
    ("eval-union", "2wikimultihopqa", "2wikimultihopqa", "/tmp/union", False),
    ("eval-union-notitles", "hotpotqa", "hotpotqa", "/tmp/union", True),
    ("eval-union-notitles", "hotpotqa-dev-b", "hotpotqa", "/tmp/union", True),
    ("eval-union-notitles", "2wikimultihopqa", "2wikimultihopqa", "/tmp/union", True),
]
MODELS = tuple(a.split("=", 1)[1] for a in sys.argv if a.startswith("--model=")) or (
    "qwen2.5-coder-1.5b-mixed", "qwen2.5-coder-0.5b-mixed")
METHODS = ("sr-rag-choose", "look-again-choose")


def old_module():
    src = subprocess.run(["git", "show", f"{OLD_COMMIT}:active_rag/retrieval/name_index.py"], cwd=R,
                         capture_output=True, text=True, check=True).stdout
    src = src.replace("from ..entities", "from active_rag.entities").replace("from ..text", "from active_rag.text")
    src = src.replace("from ..types", "from active_rag.types")
    path = Path(tempfile.mkdtemp()) / "name_index_old.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("name_index_old", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Holder:
    """A retriever stand-in that only carries a name index (linked.follow_links reads no other part of it here)."""


def with_index(index, subjects):
    holder = Holder()
    new_ni._attached[id(holder)] = (lambda: holder, index)
    return holder, subjects


def followed(version, passages, question, held, k):
    """The articles a look reads under one version of the index: the passages' links and the question's own
    articles (a comparison's look), the first ``k`` of each, as (name, passage id)."""
    holder, subjects = version
    linked.text_subjects = subjects  # what the held passages are about (linked._own_names)
    try:
        out = []
        for ps in (passages, []):
            seen = []
            for name, best in linked._followed(holder, ps, question, held, True, linked.Links()):
                if best.id not in [i for _, i in seen]:
                    seen.append((name, best.id))
            out.append(seen[:k])
        return out
    finally:
        linked.text_subjects = new_ni.text_subjects


def main():
    old_ni = old_module()
    corpora = {}
    for folder, ds_folder, dataset, data_dir, hidden in SLICES:
        key = (dataset, data_dir, hidden)
        if key not in corpora:
            passages = read_jsonl_passages(corpus_path(dataset, Path(data_dir) if data_dir else None))
            if hidden:
                passages = hidden_titles(passages)
            corpora[key] = ({p.id: p for p in passages}, old_ni.NameIndex.from_passages(passages),
                            new_ni.NameIndex.from_passages(passages))
        by_id, old_index, new_index = corpora[key]
        old, new = with_index(old_index, old_ni.text_subjects), with_index(new_index, new_ni.text_subjects)
        for model in MODELS:
            for method in METHODS:
                path = R / "results" / folder / ds_folder / model / f"{method}.jsonl"
                if not path.is_file():
                    continue
                rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
                touched = []
                for row in rows:
                    q = row["question"]
                    held: list[str] = []
                    for step in row.get("trace") or []:
                        if step.get("formulator") == "linked" and held:
                            passages = [by_id[i] for i in held if i in by_id]
                            k = step.get("top_k") or 3
                            a, b = followed(old, passages, q, set(held), k), followed(new, passages, q, set(held), k)
                            if a != b:
                                gold = set(row.get("gold_passage_ids") or [])
                                sides = {"links": [0], "compare": [1]}.get(step.get("choice"), [0, 1])  # what it read
                                a = [i for side in sides for _, i in a[side]]
                                b = [i for side in sides for _, i in b[side]]
                                touched.append((row["id"], len(gold & set(a)), len(gold & set(b)), a != b))
                                break
                        held = step.get("held_ids") or held
                read = [t for t in touched if t[3]]
                more = sum(t[2] > t[1] for t in read)
                fewer = sum(t[2] < t[1] for t in read)
                print(f"{folder}/{ds_folder} {model} {method}: {len(read)} of {len(rows)} looks read other articles "
                      f"(gold paragraphs among them: more {more}, fewer {fewer})")
                if SET_ASIDE and read:
                    set_aside(path, {t[0] for t in read})


def set_aside(path, ids):
    """Move the rows of ``ids`` out of ``path`` into ``other-settings/<method>.<engine key>-name-index-v2.jsonl``
    (a name the resume does not restore from), so that `active-rag eval` answers those questions again."""
    values, _, _ = read_rows_file(path)
    keep = [v for v in values if v["id"] not in ids]
    moved = [v for v in values if v["id"] in ids]
    by_key = {}
    for v in moved:
        by_key.setdefault(f"{v.get('engine_key')}-name-index-v2", []).append(v)
    for key, rows in by_key.items():
        target = path.parent / OTHER_SETTINGS_DIR / f"{path.stem}.{key}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        old = read_rows_file(target)[0] if target.is_file() else []
        if again := sorted({o["id"] for o in old} & {r["id"] for r in rows}):
            sys.exit(f"{target}: rows {again[:3]}... were set aside before; pass --model= for the rows not yet set aside")
        write_rows_file(target, [*[o for o in old if o["id"] not in ids], *rows])
    write_rows_file(path, keep)


def compare():
    """``--compare``: each file's rows set aside by ``--set-aside`` against the rows answered again with version 3
    (the settled answers' F1, :func:`dates.scores`), per slice, and the slice's F1 before and after."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from dates import scores  # noqa: E402

    for folder, ds_folder, dataset, _, _ in SLICES:
        for model in MODELS:
            for method in METHODS:
                path = R / "results" / folder / ds_folder / model / f"{method}.jsonl"
                aside = sorted((path.parent / OTHER_SETTINGS_DIR).glob(f"{method}.*-name-index-v2.jsonl"))
                if not path.is_file() or not aside:
                    continue
                now = {v["id"]: v for v in read_rows_file(path)[0]}
                old = {v["id"]: v for f in aside for v in read_rows_file(f)[0]}
                f1 = lambda row: scores(row, dataset)[1]  # noqa: E731
                pairs = [(f1(old[i]), f1(now[i])) for i in old if i in now]
                before = [f1(old.get(i, r)) for i, r in {**old, **now}.items()]
                after = [f1(r) for r in now.values()]
                better = sum(b > a for a, b in pairs)
                worse = sum(b < a for a, b in pairs)
                print(f"| {folder}/{ds_folder} | {model} | {method} | {len(pairs)} of {len(old)} | "
                      f"{100 * sum(a for a, _ in pairs) / max(len(pairs), 1):.1f} / "
                      f"{100 * sum(b for _, b in pairs) / max(len(pairs), 1):.1f} | {better} / {worse} | "
                      f"{100 * sum(before) / len(before):.1f} / {100 * sum(after) / len(after):.1f} |")


if __name__ == "__main__":
    compare() if "--compare" in sys.argv else main()
