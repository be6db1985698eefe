"""The framework-neutral segmenter of engine events (:mod:`active_rag.event_segments`): where each generation segment
begins and ends, what its prompt held, and the router's call; plus the per-call engine copies (:mod:`active_rag.per_call`)."""

from __future__ import annotations

import copy
import pickle
import threading
from typing import Any

import pytest

from active_rag.event_segments import (
    EventSegmenter,
    RouterCall,
    SegmentEnd,
    SegmentEvent,
    SegmentStart,
    SegmentToken,
)
from active_rag.per_call import PER_CALL_RETRIEVER, EngineCache, engine_for_call
from active_rag.types import ActiveRAGResult, Passage, Retrieval, RouteDecision, TokenEvent, TriggerDecision

P = {i: Passage(id=i, title=i.upper(), text=f"Passage {i} text.") for i in "abcdef"}
Q = "Who is the father of Kasper Schmeichel?"


def retrieval(position: int, ids: str) -> Retrieval:
    return Retrieval(position=position, query=Q, passages=[P[i] for i in ids], trigger="test")


def tokens(start: int, stop: int, ids: str | None, attempt: int = 0) -> list[TokenEvent]:
    return [
        TokenEvent(f" w{n}.{attempt}", 100 + n, -0.1 * (n + 1), 0.5 + n, n, passage_ids=None if ids is None else list(ids),
                   attempt=attempt)
        for n in range(start, stop)
    ]


def result(answer: str = "") -> ActiveRAGResult:
    return ActiveRAGResult(question=Q, answer=answer, method="test")


def run(events: list[Any]) -> list[SegmentEvent]:
    segmenter = EventSegmenter()
    out: list[SegmentEvent] = []
    for event in events:
        out.extend(segmenter.feed(event))
    return out


def of(kind: type, events: list[SegmentEvent]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def test_a_retrieval_streamed_before_the_tokens_of_the_segment_it_closes():
    """FL-RAG / FS-RAG: the check reads a segment, then retrieves; the retrieval comes first in the stream, yet the
    tokens before its position stay in the segment before it, written with the earlier passages."""
    out = run([retrieval(0, "ab"), retrieval(4, "c"), *tokens(0, 4, "ab"), retrieval(8, "d"), *tokens(4, 8, "c"),
               *tokens(8, 10, "d"), result()])
    starts, ends = of(SegmentStart, out), of(SegmentEnd, out)
    assert [(s.index, s.position, s.passage_ids) for s in starts] == [(0, 0, ["a", "b"]), (1, 4, ["c"]), (2, 8, ["d"])]
    assert [e.positions for e in ends] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [e.cause for e in ends] == ["retrieval", "retrieval", "end"]
    assert starts[1].prefix == " w0.0 w1.0 w2.0 w3.0" and starts[0].prefix == ""
    assert ends[1].text == " w4.0 w5.0 w6.0 w7.0" and ends[1].token_ids == [104, 105, 106, 107]
    assert ends[0].logprobs == pytest.approx([-0.1, -0.2, -0.3, -0.4]) and ends[0].entropies == [0.5, 1.5, 2.5, 3.5]
    # each token is reported once, in its segment, with the segment's text so far
    streamed = of(SegmentToken, out)
    assert [t.index for t in streamed] == [0] * 4 + [1] * 4 + [2] * 2
    assert streamed[5].text == " w4.0 w5.0" and streamed[5].token.position == 5
    # the order: start, its tokens, its end, then the next start
    kinds = [type(e).__name__ for e in out[:7]]
    assert kinds == ["SegmentStart", *["SegmentToken"] * 4, "SegmentEnd", "SegmentStart"]


def test_without_passage_ids_the_segment_holds_its_retrievals_passages():
    out = run([retrieval(0, "ab"), *tokens(0, 3, None), retrieval(3, "cd"), *tokens(3, 5, None), result()])
    assert [(s.position, s.passage_ids) for s in of(SegmentStart, out)] == [(0, ["a", "b"]), (3, ["c", "d"])]
    assert of(SegmentStart, run([*tokens(0, 2, None), result()]))[0].passages == ()  # no retrieval: no passages


def test_the_prompt_holds_the_passages_its_tokens_name():
    """A retrieval whose passages the prompt did not take (the tokens still name the earlier ones) starts a new
    segment at its position, whose prompt holds what the tokens name; other passages with no retrieval do too."""
    out = run([retrieval(0, "ab"), *tokens(0, 2, "ab"), retrieval(2, "cd"), *tokens(2, 4, "ab"), *tokens(4, 6, "ac")])
    assert [(s.position, s.passage_ids) for s in of(SegmentStart, out)] == [(0, ["a", "b"]), (2, ["a", "b"]),
                                                                            (4, ["a", "c"])]
    assert [e.cause for e in of(SegmentEnd, out)] == ["retrieval", "retrieval"]
    ids_unknown = run([retrieval(0, "a"), *tokens(0, 1, "az")])
    assert of(SegmentStart, ids_unknown)[0].passage_ids == ["a"]  # only passages a retrieval brought


def test_a_reanswer_is_its_own_segment_and_a_kept_draft_streamed_again_is_not_reported():
    """``look-again``: the draft (attempt 0), the look's retrieval at the draft's length, the second answer (attempt
    1, from position 0, with every passage retrieved so far, longer than the draft: one segment), then the kept draft
    streamed once more with its own attempt 0: no segment, but the answer so far."""
    segmenter = EventSegmenter()
    out: list[SegmentEvent] = []
    for event in [retrieval(0, "ab"), *tokens(0, 2, "ab"), retrieval(2, "c"), *tokens(0, 5, "abc", attempt=1)]:
        out.extend(segmenter.feed(event))
    replay = [e for event in tokens(0, 2, "ab") for e in segmenter.feed(event)]
    assert replay == []
    assert segmenter.answer == [" w0.0", " w1.0"]  # the kept draft is the answer now
    out.extend(segmenter.feed(result()))
    starts, ends = of(SegmentStart, out), of(SegmentEnd, out)
    assert [(s.attempt, s.position, s.passage_ids) for s in starts] == [(0, 0, ["a", "b"]), (1, 0, ["a", "b", "c"])]
    assert [(e.text, e.cause) for e in ends] == [(" w0.0 w1.0", "reanswer"), (" w0.1 w1.1 w2.1 w3.1 w4.1", "end")]
    assert starts[1].prefix == ""  # written again from its first word
    assert ends[1].answer_tokens == 2  # the kept draft's length


def test_a_reanswer_reads_every_retrieval_so_far_without_passage_ids():
    out = run([retrieval(0, "ab"), *tokens(0, 3, None), retrieval(3, "c"), *tokens(0, 4, None, attempt=1), result()])
    assert [(s.attempt, s.passage_ids) for s in of(SegmentStart, out)] == [(0, ["a", "b"]), (1, ["c"])]
    assert [len(e.tokens) for e in of(SegmentEnd, out)] == [3, 4]


def test_an_answer_cut_back_goes_on_in_a_new_segment():
    """A token at an earlier position of the same attempt: the engine dropped a partial sentence; the model goes on
    from the shorter answer, a new segment whose prefix is what is left."""
    out = run([retrieval(0, "a"), *tokens(0, 6, "a"), *tokens(3, 5, "a"), result()])
    starts, ends = of(SegmentStart, out), of(SegmentEnd, out)
    assert [(s.position, s.prefix) for s in starts] == [(0, ""), (3, " w0.0 w1.0 w2.0")]
    assert [(len(e.tokens), e.cause) for e in ends] == [(6, "rewind"), (2, "end")]
    assert ends[-1].answer_tokens == 5


def test_the_router_is_a_call_of_its_own_and_decisions_are_no_segment():
    decision = RouteDecision(retrieve=False, router="ta-are", prompt="Do you need to look it up?", raw_output="[No]")
    fired = TriggerDecision(fire=True, trigger="test")
    out = run([decision, *tokens(0, 2, None), fired, result("answer")])
    assert isinstance(out[0], RouterCall) and out[0].prompt == decision.prompt and out[0].output == "[No]"
    assert [type(e).__name__ for e in out[1:]] == ["SegmentStart", "SegmentToken", "SegmentToken", "SegmentEnd"]
    assert len(of(RouterCall, out)) == 1


def test_close_ends_the_segment_and_the_next_token_starts_one():
    """A consumer closes the open segment (a graph node ends, an error): the next token starts a new segment with the
    same passages, at its own position."""
    segmenter = EventSegmenter()
    for event in [retrieval(0, "ab"), *tokens(0, 2, "ab")]:
        segmenter.feed(event)
    assert segmenter.open is not None and segmenter.open.index == 0
    (end,) = segmenter.close()
    assert end.cause == "closed" and end.positions == [0, 1] and segmenter.open is None
    assert segmenter.close("error") == []  # nothing open
    out = segmenter.feed(tokens(2, 3, "ab")[0])
    assert isinstance(out[0], SegmentStart) and (out[0].index, out[0].position, out[0].prefix) == (1, 2, " w0.0 w1.0")
    assert segmenter.feed(result()) and segmenter.feed(result()) == []


# -- one configured engine, a copy per call --------------------------------------------------------------------------
class _Engine:
    def __init__(self, retriever: Any = None, router: Any = None) -> None:
        self.retriever, self.router, self.prompt = retriever, router, object()


def test_engine_for_call_swaps_only_what_is_given():
    base = _Engine(retriever=PER_CALL_RETRIEVER, router="r")
    mine = object()
    call = engine_for_call(base, retriever=mine)
    assert call is not base and call.retriever is mine and call.router == "r" and call.prompt is base.prompt
    assert base.retriever is PER_CALL_RETRIEVER  # the configured engine is left as it was
    assert engine_for_call(base, router=None).router is None and engine_for_call(base, retriever=None).retriever is None
    with pytest.raises(RuntimeError, match="per-call copy"):
        PER_CALL_RETRIEVER.retrieve(Q, 3)


def test_engine_cache_builds_once_per_settings():
    cache = EngineCache(size=2)
    built: list[dict[str, Any]] = []

    def build(settings: dict[str, Any]) -> Any:
        return lambda: built.append(settings) or _Engine()

    trigger, options = object(), {"answer_options": True}
    first = cache.get({"top_k": 3, "trigger": trigger, "options": options}, build({"top_k": 3}))
    assert cache.get({"top_k": 3, "trigger": trigger, "options": dict(options)}, build({})) is first
    assert len(built) == 1
    assert cache.get({"top_k": 3, "trigger": object(), "options": options}, build({})) is not first  # another object
    assert cache.get({"top_k": 3.0, "trigger": trigger, "options": options}, build({})) is not first  # another type
    options["answer_options"] = False  # changed in place: another setting
    assert cache.get({"top_k": 3, "trigger": trigger, "options": options}, build({})) is not first
    assert len(cache) == 2 and len(built) == 4  # the least recently used went
    with pytest.raises(ValueError):
        cache.get({"top_k": 9}, lambda: (_ for _ in ()).throw(ValueError("no retriever")))
    assert len(cache) == 2  # a failed build keeps nothing
    assert len(copy.deepcopy(cache)) == 0 and len(copy.copy(cache)) == 0 and len(pickle.loads(pickle.dumps(cache))) == 0


def test_engine_cache_builds_once_under_concurrent_calls():
    cache, built = EngineCache(), []
    barrier = threading.Barrier(4)

    def call() -> None:
        barrier.wait()
        cache.get({"top_k": 3}, lambda: built.append(1) or _Engine())

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert built == [1]
