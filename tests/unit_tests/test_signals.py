"""Unit tests of active_rag.signals on hand-made logits, attention rows and token pieces."""

from __future__ import annotations

import math

import pytest
import torch

from active_rag.signals import entropy as entropy_of
from active_rag.signals import (
    entropy,
    low_probability,
    max_later_attention,
    rind_scores,
    semantic_indicator,
    top_attended_positions,
)


# -- Eq. 1: entropy ------------------------------------------------------------------------------------
@pytest.mark.parametrize("vocab", [2, 7, 400])
def test_entropy_of_uniform_logits_is_log_vocab(vocab: int) -> None:
    assert entropy(torch.zeros(vocab)) == pytest.approx(math.log(vocab), abs=1e-5)
    assert entropy(torch.full((vocab,), 3.5)) == pytest.approx(math.log(vocab), abs=1e-5)


def test_entropy_of_one_hot_is_zero() -> None:
    one_hot = torch.tensor([float("-inf"), 0.0, float("-inf"), float("-inf")])
    assert entropy(one_hot) == 0.0  # 0 * log 0 counts as 0, not nan
    assert entropy(torch.tensor([200.0, 0.0, 0.0])) == pytest.approx(0.0, abs=1e-6)


def test_entropy_of_a_hand_computed_distribution() -> None:
    p = [0.5, 0.25, 0.125, 0.125]
    logits = torch.tensor([math.log(x) + 4.0 for x in p])  # shift-invariant
    expected = -sum(x * math.log(x) for x in p)  # 1.2130...
    assert entropy(logits) == pytest.approx(expected, abs=1e-6)
    assert entropy(logits.to(torch.bfloat16)) == pytest.approx(expected, abs=2e-2)
    assert entropy_of(logits) == pytest.approx(expected, abs=1e-6)


# -- Eq. 3: max later attention ------------------------------------------------------------------------
def test_max_later_attention_on_three_hand_made_rows() -> None:
    rows = [
        torch.tensor([0.6, 0.4]),  # token at position 2 attends to positions 0, 1
        torch.tensor([0.2, 0.7, 0.1]),  # position 3
        torch.tensor([0.5, 0.1, 0.3, 0.1]),  # position 4
    ]
    out = max_later_attention(rows, 5)
    assert out.dtype == torch.float32
    assert out.tolist() == pytest.approx([0.6, 0.7, 0.3, 0.1, 0.0])


def test_max_later_attention_truncates_and_pads() -> None:
    rows = [torch.tensor([0.9, 0.05, 0.05]), torch.tensor([0.1, 0.2, 0.3, 0.4])]
    assert max_later_attention(rows, 2).tolist() == pytest.approx([0.9, 0.2])
    assert max_later_attention([], 3).tolist() == [0.0, 0.0, 0.0]
    assert max_later_attention([torch.tensor([0.5], dtype=torch.float16)], 1).tolist() == [0.5]


# -- Eq. 4: semantic indicator -------------------------------------------------------------------------
def test_semantic_indicator_stop_words_content_words_and_punctuation() -> None:
    pieces = [" The", " Danish", " goalkeeper", " is", " the", " son", " of", " Peter", ".", ","]
    assert semantic_indicator(pieces) == [0, 1, 1, 0, 0, 1, 0, 1, 0, 0]


def test_semantic_indicator_sub_word_pieces_take_their_words_value() -> None:
    # " Sch" + "meichel" is one content word; " any" + "one" is the stop word "anyone"; " goal"+"keeper"
    pieces = [" Sch", "meichel", " any", "one", " goal", "keeper", "!"]
    assert semantic_indicator(pieces) == [1, 1, 0, 0, 1, 1, 0]


def test_semantic_indicator_edge_pieces() -> None:
    pieces = ["<|im_start|>", "Peter", "'s", " 1992", " (", "IFFHS", ")", " \n"]
    assert semantic_indicator(pieces) == [0, 1, 0, 1, 0, 1, 0, 0]
    # a character split over byte tokens: the empty leading piece belongs to the word it completes
    assert semantic_indicator(["Z", "", "ü", "rich", " is", ""]) == [1, 1, 1, 1, 0, 0]
    assert semantic_indicator([]) == []


# -- Eq. 5: RIND ---------------------------------------------------------------------------------------
def test_rind_scores_is_the_product() -> None:
    scores = rind_scores([2.0, 3.0, 0.5, 10.0], [0.5, 0.2, 0.9, 0.8], [1, 1, 1, 0])
    assert scores == pytest.approx([1.0, 0.6, 0.45, 0.0])
    with pytest.raises(ValueError):
        rind_scores([1.0, 2.0], [0.5], [1, 1])


# -- FLARE: low probability ----------------------------------------------------------------------------
def test_low_probability() -> None:
    logprobs = [math.log(0.95), math.log(0.1), math.log(0.6), math.log(0.39), 0.0]
    assert low_probability(logprobs, 0.4) == [False, True, False, True, False]
    assert low_probability(logprobs, 0.8) == [False, True, True, True, False]
    assert low_probability([], 0.5) == []


# -- QFS: top attended positions -----------------------------------------------------------------------
ROW = torch.tensor([0.05, 0.30, 0.10, 0.25, 0.02, 0.28])


def test_top_attended_positions_returns_top_n_in_original_order() -> None:
    assert top_attended_positions(ROW, list(range(6)), 3) == [1, 3, 5]
    assert top_attended_positions(ROW, list(range(6)), 1) == [1]
    assert top_attended_positions(ROW, list(range(6)), 10) == [0, 1, 2, 3, 4, 5]


def test_top_attended_positions_respects_candidates() -> None:
    assert top_attended_positions(ROW, [0, 2, 3, 4], 2) == [2, 3]
    assert top_attended_positions(ROW, [5, 4, 0], 2) == [0, 5]  # original order, whatever the candidate order
    assert top_attended_positions(ROW, [4, 6, 7, 99], 2) == [4]  # positions beyond the row are ignored
    assert top_attended_positions(ROW, [], 3) == []
    assert top_attended_positions(ROW, [1, 2], 0) == []
    assert top_attended_positions(ROW, [7, 8], 2) == []
