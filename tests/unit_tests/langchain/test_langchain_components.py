"""TriggerRunnable and QueryRunnable: the engine's triggers and query formulators as LCEL components."""

from __future__ import annotations

import math

import pytest
import torch
from langchain_core.runnables import RunnableLambda

from active_rag import (
    LowConfidenceTrigger,
    QueryContext,
    SegmentContext,
    TokenStep,
    TriggerDecision,
    UnknownNameError,
    make_query,
    make_trigger,
)
from langchain_active_rag import ActiveRAG, QueryRunnable, TriggerRunnable


def _steps(pairs: list[tuple[str, float]]) -> list[TokenStep]:
    return [TokenStep(id=i, text=t, logprob=math.log(p), entropy=1.0, position=i) for i, (t, p) in enumerate(pairs)]


SEGMENT = [(" Peter", 0.9), (" Schmeichel", 0.3), (" was", 0.95), (" a", 0.97), (" goalkeeper", 0.5), (".", 0.99)]


@pytest.mark.parametrize("name", ["low-confidence", "fixed-length", "fixed-sentence", "never", "search-tag"])
def test_trigger_runnable_gives_the_engine_decision(name):
    steps = _steps(SEGMENT)
    expected = make_trigger(name).check(SegmentContext(steps)).to_dict()
    runnable = TriggerRunnable(name)
    assert runnable.invoke(SegmentContext(steps)) == expected
    as_dicts = [{"text": s.text, "logprob": s.logprob, "entropy": s.entropy} for s in steps]
    assert runnable.invoke({"segment": as_dicts}) == expected
    assert runnable.invoke([{"token": t, "prob": p} for t, p in SEGMENT])["fire"] == expected["fire"]


def test_low_confidence_decision_fields():
    decision = TriggerRunnable("flare").invoke([{"token": t, "prob": p} for t, p in SEGMENT])
    assert decision["fire"] is True and decision["trigger"] == "low-confidence"
    assert decision["index"] == 1 and decision["token"] == " Schmeichel"
    assert decision["score"] == pytest.approx(0.3) and decision["threshold"] == 0.8
    tokens = [{"token": t, "prob": p} for t, p in SEGMENT]
    assert TriggerRunnable(LowConfidenceTrigger(theta=0.2)).invoke(tokens)["fire"] is False
    assert TriggerRunnable("low-confidence", trigger_options={"theta": 0.2}).invoke(tokens)["fire"] is False


def test_rind_trigger_takes_max_attention():
    steps = [{"token": " Schmeichel", "logprob": -2.0, "entropy": 4.0}, {"token": " goalkeeper", "logprob": -1.0, "entropy": 3.0}]
    ctx = {"segment": steps, "max_attention": [0.9, 0.05]}
    decision = TriggerRunnable("rind").invoke(ctx)
    segment = [TokenStep(0, " Schmeichel", -2.0, 4.0, 0), TokenStep(0, " goalkeeper", -1.0, 3.0, 1)]
    expected = make_trigger("rind").check(SegmentContext(segment, torch.tensor([0.9, 0.05])))
    assert decision == expected.to_dict()
    assert decision["fire"] is True and decision["index"] == 0  # S_RIND = 4.0 * 0.9 * 1 > 1.2


def test_streamed_tokens_feed_a_trigger(tiny_lm, fake_retriever):
    """Compose: stream an answer with ActiveRAG, then ask another trigger about its tokens. The thresholds are
    placed around the streamed tokens' own probabilities, so each decision is certain whatever the model's
    confidence: just above the lowest probability it fires at that token, below it it holds."""
    from langchain_active_rag import ActiveRAG as Chain

    from langchain_core.callbacks import BaseCallbackHandler

    from langchain_active_rag import TOKEN_EVENT

    class Tokens(BaseCallbackHandler):
        def __init__(self) -> None:
            self.tokens: list[dict] = []

        def on_custom_event(self, name: str, data: dict, **kw: object) -> None:
            if name == TOKEN_EVENT:
                self.tokens.append(data)

    recorder = Tokens()
    list(Chain(tiny_lm, preset="wo-rag", max_new_tokens=8).stream("Who?", {"callbacks": [recorder]}))
    tokens = recorder.tokens  # the active_rag.token events: text, logprob, entropy, position
    assert len(tokens) == 8 and [t["position"] for t in tokens] == list(range(8))
    probs = [math.exp(t["logprob"]) for t in tokens]
    lowest = min(range(len(probs)), key=probs.__getitem__)  # the first of the lowest
    next_up = min(p for p in probs if p > probs[lowest])
    assert 0 < probs[lowest] < next_up

    def ask(theta: float) -> dict:
        trigger = TriggerRunnable("low-confidence", trigger_options={"theta": theta})
        return (RunnableLambda(lambda ts: {"segment": ts}) | trigger).invoke(tokens)

    fired = ask((probs[lowest] + next_up) / 2)  # only the lowest token is below it
    assert fired["fire"] is True and fired["index"] == lowest and fired["token"] == tokens[lowest]["text"]
    assert fired["score"] == pytest.approx(probs[lowest]) and fired["token_scores"] == pytest.approx(probs)
    held = ask(probs[lowest] / 2)  # every token is above it
    assert held["fire"] is False and held["index"] == lowest and held["score"] == pytest.approx(probs[lowest])


def test_query_runnable_gives_the_engine_query():
    steps = _steps(SEGMENT)
    decision = TriggerDecision(fire=True, trigger="low-confidence", index=1, token=" Schmeichel")
    ctx = QueryContext(question="Who was Peter?", output=[], segment=steps, decision=decision, action="regenerate")
    assert QueryRunnable("masked-sentence").invoke(ctx) == make_query("masked-sentence").formulate(ctx)[0]
    assert QueryRunnable("masked-sentence").invoke(ctx) == "Peter was a goalkeeper ."
    mapping = {
        "question": "Who was Peter?",
        "segment": [{"token": t, "prob": p} for t, p in SEGMENT],
        "decision": {"index": 1, "token": " Schmeichel", "trigger": "low-confidence"},
        "action": "regenerate",
    }
    assert QueryRunnable("flare").invoke(mapping) == "Peter was a goalkeeper ."
    assert QueryRunnable("input").invoke({"question": "Who was Peter?"}) == "Who was Peter?"
    assert QueryRunnable("input", as_list=True).invoke("Who was Peter?") == ["Who was Peter?"]
    assert QueryRunnable("full-context").invoke({"question": "Who?", "output": "He was"}) == "Who? He was"
    assert QueryRunnable("last-tokens", query_options={"n": 2}).invoke(mapping) == "goalkeeper."


def test_components_batch_and_unknown_names():
    assert len(TriggerRunnable("fixed-length").batch([[" a"], [" b"]])) == 2
    with pytest.raises(UnknownNameError, match="trigger"):
        TriggerRunnable("sometimes").invoke([" a"])
    with pytest.raises(UnknownNameError, match="query formulator"):
        QueryRunnable("psychic").invoke({"question": "q"})
    with pytest.raises(ValueError, match="no 'segment'"):
        TriggerRunnable("fixed-length").invoke({"tokens_x": []})
    with pytest.raises(ValueError, match="no 'question'"):
        QueryRunnable("input").invoke({"output": "x"})


def test_generated_questions_uses_the_model(tiny_lm):
    mapping = {
        "question": "Who was Peter?",
        "segment": [{"token": t, "prob": p} for t, p in SEGMENT],
        "decision": {"index": 4},
        "action": "regenerate",
    }
    queries = QueryRunnable("generated-questions", lm=tiny_lm, query_options={"max_new_tokens": 4}, as_list=True).invoke(mapping)
    assert len(queries) == 1 and queries[0]  # one low-probability span (" Schmeichel"), one generated question


def test_trigger_runnable_instances_work_inside_active_rag(tiny_lm, fake_retriever):
    # the same trigger object a TriggerRunnable wraps drives the engine
    trigger = TriggerRunnable("fixed-length").engine_trigger
    rag = ActiveRAG(tiny_lm, trigger=trigger, query="last-tokens", max_new_tokens=4)
    assert rag.build_engine(fake_retriever).trigger is trigger
