"""Six passages given every answer rule of the defaults, the `same` rule included, against the `ask` defaults on
pydocs: `python results/eval-budget-same/compare.py` from the repository root (writes compare-{dev,fresh}-{model}.md
beside this file; the second folder needs `/tmp/pydocs-fresh`, docs/context.md "Another folder").

The `same` rule (active_rag.answer.same_value) asks the model, so the six-passage control's rows cannot be settled by
it afterwards as the date and version rules can (`compare --settle`): `sr-rag --top-k 6 --ask-same` was run on the
same-author questions only (a data folder holding just those questions beside the same docs), and here its rows
replace the control's on those questions; `compare --settle control` then adds the rules that need no model call.

    E="active-rag eval --dataset pydocs --weights mixed --batch-size 8 --threads 2 --methods sr-rag --top-k 6 --ask-same"
    $E --data-dir /tmp/same-only-data --model M --out results/eval-budget-same/pydocs-dev      # docs/ + the 32 same-author questions
    $E --data-dir /tmp/same-only-pydocs-fresh --model M --out results/eval-budget-same/pydocs-fresh   # the 20 of the second folder
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

R = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
DEFAULTS = {"qwen2.5-coder-0.5b": "look-again-choose@context=focus", "qwen2.5-coder-1.5b": "sr-rag-choose"}
FOLDERS = {  # name -> (data dir, control rows folder, default rows folder)
    "dev": ("../shared/data", R / "eval-budget", R / "eval"),
    "fresh": ("/tmp/pydocs-fresh", R / "eval-heldout/pydocs-fresh/eval-budget", R / "eval-heldout/pydocs-fresh/eval"),
}


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main():
    tmp = Path(tempfile.mkdtemp(prefix="same-control-"))
    for name, (data_dir, budget, default_dir) in FOLDERS.items():
        if not Path(data_dir).is_dir():
            print(f"{name}: {data_dir} is missing, skipped", file=sys.stderr)
            continue
        for model, method in DEFAULTS.items():
            same = {r["id"]: r for r in read(HERE / f"pydocs-{name}/pydocs/{model}-mixed/sr-rag@same.jsonl")}
            control = [same.get(r["id"], r) for r in read(budget / f"pydocs/{model}-mixed/sr-rag.jsonl")]
            merged = tmp / f"{name}-{model}.jsonl"
            merged.write_text("".join(json.dumps(r) + "\n" for r in control))
            default = default_dir / f"pydocs/{model}-mixed/{method}.jsonl"
            out = subprocess.run([sys.executable, "-m", "active_rag.evaluation.compare", "--dataset", "pydocs",
                                  "--data-dir", data_dir, "--by", "type", "--baseline", "control", "--baseline",
                                  "control+rules", "--settle", "control", f"control={merged}", f"default={default}"],
                                 check=True, capture_output=True, text=True).stdout
            target = HERE / f"compare-{name}-{model.split('-')[-1]}.md"
            target.write_text(f"# {model} default against six passages given the same rule ({name})\n\n"
                              f"`control`: six passages, the same-author questions answered with `--ask-same`; "
                              f"`control+rules`: that, with the dates and versions settled too.\n\n{out}")
            print(target)


if __name__ == "__main__":
    main()
