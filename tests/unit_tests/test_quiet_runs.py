"""A plain load and answer prints nothing but the answer: no deprecation warning, no third-party progress bar."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import build_tiny_model

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from active_rag import ActiveLM, ActiveRAG, Passage

class Retriever:
    def retrieve(self, query, k):
        return [Passage(id=str(i), title=f"T{{i}}", text=f"Passage {{i}} about {{query}}") for i in range(k)]

lm = ActiveLM.load({folder!r}, weights="int8", device="cpu")
for preset in ("sr-rag", "dragin"):
    ActiveRAG.from_preset(preset, lm, Retriever(), max_new_tokens=12).run("Who is Kasper Schmeichel?")
print("done")
"""


@pytest.mark.slow
def test_loading_and_answering_print_no_warning_and_no_progress_bar(tmp_path: Path, tiny_tokenizer) -> None:
    folder = tmp_path / "tiny-model"
    build_tiny_model(len(tiny_tokenizer)).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ACTIVE_RAG_CACHE": str(tmp_path / "cache")}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", SCRIPT.format(root=str(ROOT), folder=str(folder))],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "done"
    assert "Warning" not in done.stderr and "Loading weights" not in done.stderr, done.stderr[-2000:]
