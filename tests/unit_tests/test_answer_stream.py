"""AnswerStream: the adapters' streamed answer joins to the engine's answer (a dropped partial sentence, a
repeated sentence, a second answer) and holds back nothing else."""

from __future__ import annotations

import pytest

from active_rag import ActiveRAG, AnswerStream
from active_rag.types import TokenEvent


def _events(texts: list[str], start: int = 0) -> list[TokenEvent]:
    return [TokenEvent(text=t, token_id=0, logprob=0.0, entropy=0.0, position=start + i) for i, t in enumerate(texts)]




def test_tokens_stream_one_by_one_before_a_forced_answer_phrase() -> None:
    """A forced phrase cuts nothing (it closes the unfinished sentence), so the unfinished sentence streams too."""
    stream = AnswerStream()
    pieces = [stream.push(e) for e in _events([" He", " was", " born", " in", " 1990.", " He", " play"])]
    assert pieces == ["He", " was", " born", " in", " 1990.", " He", " play"]
    assert stream.finish("He was born in 1990. He play. So the answer is X.") == ". So the answer is X."


def test_tokens_stream_one_by_one_without_an_answer_phrase() -> None:
    stream = AnswerStream()
    assert [stream.push(e) for e in _events([" A", " b ", "c"])] == ["A", " b", " c"]
    assert stream.finish("A b c") == ""


def test_a_rewriting_engine_sends_its_answer_at_the_end() -> None:
    stream = AnswerStream(rewrites=True)
    assert [stream.push(e) for e in _events(["A", " done."])] == ["", ""]
    assert stream.finish("B done.") == "B done."


def test_a_sentence_that_may_repeat_an_earlier_one_is_held_until_it_differs() -> None:
    stream = AnswerStream(repetition_guard=True)
    pieces = [stream.push(e) for e in _events(["He", " won.", " He", " won", " twice."])]
    assert pieces == ["He", " won.", "", "", " He won twice."]


def test_a_repeated_sentence_the_engine_drops_is_never_sent() -> None:
    stream = AnswerStream(repetition_guard=True)
    assert "".join(stream.push(e) for e in _events(["He", " won.", " He", " won."])) == "He won."
    assert stream.finish("He won.") == ""  # the engine's answer without the repeat: the pieces join to it


def test_sentence_truncation_holds_the_unfinished_sentence() -> None:
    stream = AnswerStream(sentence_truncation=True)
    assert [stream.push(e) for e in _events(["A", " done.", " Half"])] == ["", "A done.", ""]


def test_the_engine_says_what_its_stream_holds_back(tiny_lm, fake_retriever) -> None:
    """The engine's own settings decide it: the repetition guard is on by default (a sentence that may repeat is held
    back), DRAGIN truncating to sentences holds back the unfinished sentence, an answer check rewrites."""
    def flags(rag: ActiveRAG) -> tuple[bool, bool, bool]:
        stream = rag.answer_stream()
        return stream.repetition_guard, stream.sentence_truncation, stream.rewrites

    assert flags(ActiveRAG.from_preset("sr-rag", tiny_lm, fake_retriever)) == (True, False, False)
    assert flags(ActiveRAG.from_preset("sr-rag", tiny_lm, fake_retriever, repetition_guard=False)) == (False, False, False)
    dragin = ActiveRAG.from_preset("dragin", tiny_lm, fake_retriever)
    assert flags(dragin)[1] is False
    dragin.trigger.truncate = "sentence"
    assert flags(dragin)[1] is True
    assert flags(ActiveRAG.from_preset("look-again-choose", tiny_lm, fake_retriever))[2] is True


# -- the engine streams a token nothing checks as soon as it is generated ---------------------------------------


@pytest.mark.parametrize("preset", ["wo-rag", "sr-rag", "sr-rag-linked"])
def test_an_unchecked_answer_streams_each_token_as_it_is_generated(tiny_lm, fake_retriever, generated, preset) -> None:
    rag = ActiveRAG.from_preset(preset, tiny_lm, fake_retriever, max_new_tokens=12, top_k=2)
    seen: list[tuple[int, int]] = []  # (token position, tokens generated when it arrived)
    for event in rag.stream("Who is the father of Kasper Schmeichel?"):
        if isinstance(event, TokenEvent) and event.attempt == 0 and len(seen) < 12:
            seen.append((event.position, generated[0]))
    assert seen[:12] == [(n, n + 1) for n in range(12)]  # token n arrives when n + 1 tokens were generated


def test_a_checked_segment_streams_after_its_check(tiny_lm, fake_retriever, generated) -> None:
    """FL-RAG checks each 16-token window before accepting it: its first token comes once the window is written."""
    rag = ActiveRAG.from_preset("fl-rag", tiny_lm, fake_retriever, max_new_tokens=20, top_k=1)
    first = next(generated[0] for event in rag.stream("Who is Kasper?") if isinstance(event, TokenEvent))
    assert first == 16
