"""AnswerStream: the adapters' streamed answer joins to the engine's answer (a dropped partial sentence, a
second answer)."""

from __future__ import annotations

from active_rag import AnswerStream
from active_rag.types import TokenEvent


def _events(texts: list[str], start: int = 0) -> list[TokenEvent]:
    return [TokenEvent(text=t, token_id=0, logprob=0.0, entropy=0.0, position=start + i) for i, t in enumerate(texts)]


def test_whole_sentences_are_sent_once_they_end() -> None:
    stream = AnswerStream(whole_sentences=True)
    pieces = [stream.push(e) for e in _events([" He", " was", " born", " in", " 1990.", " He", " play", "ed."])]
    assert pieces == ["", "", "", "", "He was born in 1990.", "", "", " He played."]
    assert stream.finish("He was born in 1990. He played. So the answer is X.") == " So the answer is X."


def test_a_rewound_partial_sentence_is_never_sent() -> None:
    """The engine drops " Half" (position 2) and forces the answer phrase from there."""
    stream = AnswerStream(whole_sentences=True)
    assert [stream.push(e) for e in _events(["A", " done.", " Half"])] == ["", "A done.", ""]
    forced = [stream.push(e) for e in _events([" So", " the", " answer", " is", " B."], start=2)]
    assert "".join(forced) == " So the answer is B." and stream.finish("A done. So the answer is B.") == ""


def test_tokens_stream_one_by_one_without_an_answer_phrase() -> None:
    stream = AnswerStream()
    assert [stream.push(e) for e in _events([" A", " b ", "c"])] == ["A", " b", " c"]
    assert stream.finish("A b c") == ""


def test_a_rewriting_engine_sends_its_answer_at_the_end() -> None:
    stream = AnswerStream(whole_sentences=True, rewrites=True)
    assert [stream.push(e) for e in _events(["A", " done."])] == ["", ""]
    assert stream.finish("B done.") == "B done."
