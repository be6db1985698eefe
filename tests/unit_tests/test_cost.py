"""The cost of a question in every result: retriever calls, counted where the engine calls the retriever
(:func:`active_rag.retrieval.rankings.fetch_rankings`), and prompt tokens read; in ``ActiveRAGResult``, its ``to_dict`` and
``ask`` (``--json`` and the printed summary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from active_rag import ActiveRAG, Passage
from active_rag.cli.commands import main
from active_rag.retrieval.rankings import count_retriever_calls, fetch_rankings
from active_rag.types import ActiveRAGResult, Retrieval
from tests.unit_tests.test_loop import QUESTION, Recorder, ScriptedLM, words
from tests.recipes import build


class Counting(Recorder):
    """The test_loop recorder: every query asked, so the calls the retriever saw are known."""


def _answer(prompt: str) -> list:
    return words("Kasper's father is Peter Smith. Peter won. So the answer is Peter.")


@pytest.mark.filterwarnings("ignore:follow_links")
@pytest.mark.parametrize("preset", ["wo-rag", "sr-rag", "fs-rag", "look-again", "look-again-linked", "sr-rag-linked"])
def test_the_result_counts_every_call_the_engine_made_of_the_retriever(preset: str) -> None:
    retriever = Counting()
    result = build(preset, ScriptedLM(script=_answer), retriever, top_k=2).run(QUESTION)
    assert result.retriever_calls == len(retriever.queries)  # what the retriever itself saw
    assert result.retriever_calls == sum(r.retriever_calls for r in result.retrievals)
    assert all(r.to_dict()["retriever_calls"] == r.retriever_calls for r in result.retrievals)
    assert result.to_dict()["retriever_calls"] == len(retriever.queries)
    if preset == "wo-rag":
        assert result.retriever_calls == 0
    else:
        assert result.retrievals[0].retriever_calls == 1  # the question alone


def test_a_retrieval_with_several_queries_counts_one_call_each() -> None:
    from active_rag.engine import Run
    from active_rag.engine.generation import Generation
    from active_rag.engine.retrieving import Retrieving
    from active_rag.types import TriggerDecision

    retriever = Counting()
    rag = ActiveRAG(ScriptedLM(script=_answer), retriever, trigger="once", query="input", top_k=2)
    run = Run(question=QUESTION, trigger=rag.trigger)
    retrieving = Retrieving(rag, Generation(rag))
    retrieval = retrieving.retrieve(run, ["Peter", "Kasper", " "], position=0,
                                    decision=TriggerDecision(fire=True, trigger="once"), details={})
    assert retrieval.retriever_calls == 2 and retriever.queries == ["Peter", "Kasper"]  # the blank query is not asked


def test_the_counter_counts_only_inside_its_block_and_nests() -> None:
    retriever = Counting()
    fetch_rankings(retriever, ["a"], 1)  # outside any block: not counted anywhere
    with count_retriever_calls() as outer:
        fetch_rankings(retriever, ["b", "c"], 1)
        with count_retriever_calls() as inner:
            fetch_rankings(retriever, ["d"], 1)
    assert (outer.n, inner.n) == (3, 1)


def test_prompt_tokens_read_are_the_cached_and_the_prefilled() -> None:
    result = ActiveRAGResult(question="q", answer="a", method="m", cached_prompt_tokens=30, prefilled_prompt_tokens=12,
                             retrievals=[Retrieval(position=0, query="q", passages=[], trigger="once", retriever_calls=2),
                                         Retrieval(position=0, query="q", passages=[Passage(id="p", text="t")], trigger="x")])
    assert result.prompt_tokens_read == 42 and result.retriever_calls == 2  # a record made outside the engine: none
    data = result.to_dict()
    assert data["prompt_tokens"] == {"cached": 30, "prefilled": 12, "read": 42} and data["retriever_calls"] == 2


def test_ask_gives_the_cost_in_json_and_prints_it(tiny_dir: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["ask", "Who is Kasper Schmeichel?", "--model", str(tiny_dir), "--corpus", str(corpus), "--method", "fl-rag",
            "--max-new-tokens", "20", "--top-k", "2", "--device", "cpu", "--dtype", "float32"]
    assert main([*base, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["retriever_calls"] == len(data["retrievals"]) >= 2  # fl-rag: one query a retrieval
    assert data["retriever_calls"] == sum(r["retriever_calls"] for r in data["retrievals"])
    tokens = data["prompt_tokens"]
    assert tokens["read"] == tokens["cached"] + tokens["prefilled"] > 0
    assert main(base) == 0
    out = capsys.readouterr().out
    assert f"Retriever calls: {data['retriever_calls']}\n" in out
    assert (f"Prompt tokens: {tokens['read']} read ({tokens['cached']} from the prefix cache, "
            f"{tokens['prefilled']} prefilled)") in out
