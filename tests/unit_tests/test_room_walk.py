"""A question's walk from the LangChain runnable to the answer enters each room of the code once (``tests/room_walk.py``):
no room hands a function of its own to a lower room that calls it back, on any of the methods' presets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import room_walk  # noqa: E402

sys.path.pop(0)


@pytest.mark.parametrize("preset", [None, "flare", "dragin", "self-ask", "fl-rag", "sr-rag-choose", "look-again-choose"])
def test_a_question_enters_each_room_once(preset: str | None) -> None:
    paths = room_walk.room_paths(room_walk.langchain_call(preset))
    rooms = {room for path in paths for room in path}
    walked = {"langchain_active_rag", "engine", "components", "decoding"} | ({"retrieval"} if preset != "self-ask" else set())
    assert walked <= rooms, rooms  # self-ask retrieves only on the model's "Follow up:", which a random model never writes
    assert room_walk.returns(paths) == []
    assert room_walk.climbs(paths) == []


def test_the_walk_sees_a_callback_that_climbs_back_up(tiny_lm) -> None:
    """A function of the engine's room handed to the decoding room, which calls it: decoding -> engine."""
    from active_rag.engine.generation import text_of

    session = tiny_lm.session(tiny_lm.tokenizer.encode("Who is the father of Kasper Schmeichel?"))
    paths = room_walk.room_paths(lambda: list(session.generate(3, stop=lambda steps: bool(text_of(steps)) and False)),
                                 entry=None)
    assert ("decoding", "engine") in room_walk.climbs(paths)


def test_returns_and_climbs_on_made_up_paths() -> None:
    paths = {("langchain_active_rag", "engine", "decoding", "engine"), ("langchain_active_rag", "engine", "answer")}
    assert room_walk.returns(paths) == [("langchain_active_rag", "engine", "decoding", "engine")]
    assert room_walk.climbs(paths) == [("decoding", "engine")]
    assert room_walk.returns({("engine", "components", "decoding"), ("engine", "decoding")}) == []
