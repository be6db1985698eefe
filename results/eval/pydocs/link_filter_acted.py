"""Where the link filter acted on pydocs, 0.5B `look-again-choose --context focus:link_filter=1`, against the
default's rows as they were when the filter's rows were written (commit 1f4f52b; the default's rows have been settled
with the `subject` and `same` rules since).

    python results/eval/pydocs/link_filter_acted.py

Counts the questions whose trace has link scores (the filter scored a look's links), those where it left a link out,
and splits the questions whose F1 differs from the default's by why: the filter left a link out and the final passages
differ; other final passages without the filter leaving anything out (the engine's changes since the default's rows);
the same final passages (the prefix cache's splits: docs/evaluation.md).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RUN = "results/eval/pydocs/qwen2.5-coder-0.5b-mixed"
DEFAULT_AT = "1f4f52b"


def rows(text: str) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, text.splitlines()) if r.get("id")}


def main() -> None:
    old = subprocess.run(["git", "show", f"{DEFAULT_AT}:{RUN}/look-again-choose@context=focus.jsonl"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    default = rows(old)
    filt = rows((ROOT / RUN / "look-again-choose@context=focus_link_filter=1.jsonl").read_text())
    scored = {k for k, r in filt.items() if any(t.get("link_scores") for t in r["trace"])}
    left_out = {k for k, r in filt.items() if any(t.get("filtered") for t in r["trace"])}
    split: dict[str, list[str]] = {"filter left a link out, other passages": [], "other passages, nothing left out": [],
                                   "same passages": []}
    for k, r in filt.items():
        d = default[k]
        if r["metrics"]["f1"] == d["metrics"]["f1"]:
            continue
        sign = "+" if r["metrics"]["f1"] > d["metrics"]["f1"] else "-"
        if r["final_passage_ids"] == d["final_passage_ids"]:
            split["same passages"].append(f"{k} ({sign})")
        elif k in left_out:
            split["filter left a link out, other passages"].append(f"{k} ({sign})")
        else:
            split["other passages, nothing left out"].append(f"{k} ({sign})")
    print(f"questions: {len(filt)}; the filter scored links on {len(scored)}, left at least one out on {len(left_out)}")
    print(f"F1 differs from the default's rows on {sum(map(len, split.values()))}:")
    for why, ids in split.items():
        print(f"- {why}: {len(ids)}: {', '.join(ids)}")


if __name__ == "__main__":
    main()
