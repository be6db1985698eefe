"""One helper (active_rag.validation.check_fields) checks the numeric fields of triggers and query formulators."""

from __future__ import annotations

import dataclasses

import pytest

from active_rag.errors import InvalidOptionError
from active_rag.components.queries import make_query
from active_rag.components.triggers import make_trigger
from active_rag.validation import check_fields


@dataclasses.dataclass
class Knobs:
    name: str = "knobs"
    theta: float = 0.5
    beta: float = 0.4
    max_tokens: int = 8
    count: int = 1
    weight: float = 1.0
    _private: int = -1  # not checked


@pytest.mark.parametrize("changes, counts_from, needle", [
    ({"count": 0}, 1, "knobs count must be at least 1"),
    ({"max_tokens": 0}, 0, "knobs max_tokens must be at least 1"),
    ({"beta": 1.5}, 0, "knobs beta must be between 0 and 1"),
    ({"theta": -0.1}, 0, "knobs theta must be at least 0"),
    ({"weight": float("nan")}, 0, "knobs weight must be a finite number"),
])
def test_check_fields_names_the_field_and_its_range(changes: dict[str, float], counts_from: int, needle: str) -> None:
    check_fields(Knobs(), counts_from=counts_from)
    with pytest.raises(InvalidOptionError, match=needle):
        check_fields(Knobs(**changes), counts_from=counts_from)


def test_counts_may_be_0_for_triggers_and_not_for_query_formulators() -> None:
    check_fields(Knobs(count=0), counts_from=0)
    assert make_trigger("search-tag", forbid_tokens=0).forbid_tokens == 0
    with pytest.raises(InvalidOptionError, match="last-tokens n must be at least 1"):
        make_query("last-tokens", n=0)
    with pytest.raises(InvalidOptionError, match="masked-sentence beta must be between 0 and 1"):
        make_query("masked-sentence", beta=2.0)
