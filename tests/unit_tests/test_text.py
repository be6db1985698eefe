"""Unit tests of active_rag.text: sentence splitting, the first-sentence boundary, stop words and the
grouping of sub-word pieces into words."""

from __future__ import annotations

import pytest

from active_rag import text
from active_rag.text import first_sentence_end, is_content_word, split_sentences, stop_words, word_groups, word_of


def punkt_is_trained() -> bool:
    return type(text._punkt()).__name__ == "PunktTokenizer"


needs_trained_punkt = pytest.mark.skipif(not punkt_is_trained(), reason="NLTK's English punkt model is not installed")


# -- split_sentences -----------------------------------------------------------------------------------
def test_split_sentences_on_punctuation_and_newlines() -> None:
    assert split_sentences("Kasper is Danish. He plays in goal! Is he good?") == [
        "Kasper is Danish.",
        "He plays in goal!",
        "Is he good?",
    ]
    assert split_sentences("First line without a stop\nSecond line.\n\n  \nThird") == [
        "First line without a stop",
        "Second line.",
        "Third",
    ]
    assert split_sentences("") == [] and split_sentences(" \n \n") == []


@needs_trained_punkt
def test_split_sentences_keeps_abbreviations() -> None:
    assert split_sentences("Dr. Smith went home. He slept.") == ["Dr. Smith went home.", "He slept."]
    assert split_sentences("It costs 5 U.S. dollars. Then it rose.") == ["It costs 5 U.S. dollars.", "Then it rose."]


# -- first_sentence_end --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, expected",
    [
        ("", None),
        ("Kasper is", None),
        ("Kasper is Danish.", None),  # complete, but nothing follows yet
        ("Kasper is Danish. ", None),
        ("Kasper is Danish. He", 17),
        ("Kasper is Danish! He", 17),
        ("Is Kasper Danish? Yes", 17),
        ("Kasper is Danish.\nHe", 17),
        ("Kasper is Danish.\n", None),
        ("Kasper is Danish\nHe", 16),  # a line break ends a sentence
        ("  Kasper is Danish. He", 19),
        ("Kasper is Danish. He plays. In goal.", 17),
    ],
)
def test_first_sentence_end(value: str, expected: int | None) -> None:
    assert first_sentence_end(value) == expected
    if expected is not None:
        assert value[:expected].rstrip().endswith(("Danish.", "Danish!", "Danish?", "Danish"))


@needs_trained_punkt
def test_first_sentence_end_with_abbreviations() -> None:
    assert first_sentence_end("Dr. Smith") is None
    assert first_sentence_end("Dr. Smith went home.") is None
    assert first_sentence_end("Dr. Smith went home. He") == len("Dr. Smith went home.")
    assert first_sentence_end("It costs 5 U.S. dollars. Then") == len("It costs 5 U.S. dollars.")


# -- stop words ----------------------------------------------------------------------------------------
def test_stop_words_are_spacys_lower_cased() -> None:
    from spacy.lang.en.stop_words import STOP_WORDS

    words = stop_words()
    assert isinstance(words, frozenset)
    assert words == frozenset(w.lower() for w in STOP_WORDS)
    assert {"the", "is", "of", "anyone", "'s", "n't"} <= words
    assert all(w == w.lower() for w in words)
    assert "goalkeeper" not in words and "danish" not in words


@pytest.mark.parametrize(
    "word, content",
    [
        ("Goalkeeper", True),
        (" Schmeichel,", True),
        ('"Danish"', True),
        ("1992", True),
        ("The", False),
        (" IS", False),
        ("'s", False),
        ("n't", False),
        (".", False),
        (" (", False),
        ("—", False),
        ("", False),
        ("<|im_end|>", False),
    ],
)
def test_is_content_word(word: str, content: bool) -> None:
    assert is_content_word(word) is content


# -- word_groups ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pieces, groups",
    [
        ([" Sch", "meichel", " is", " a", " goal", "keeper", "."], [[0, 1], [2], [3], [4, 5], [6]]),
        (["Kasper", "'s", " father"], [[0], [1], [2]]),
        (["Peter", ",", "Kasper"], [[0], [1], [2]]),  # a word after punctuation starts a new word
        (["1", "9", "92", " and"], [[0, 1, 2], [3]]),
        (["\n", "Follow", " up"], [[0], [1], [2]]),
        # an empty piece (a character's leading byte) belongs to the word that the next piece completes
        (["Z", "", "ü", "rich", " ", "", "é", "t", "é"], [[0, 1, 2, 3], [4], [5, 6, 7, 8]]),
        (["Peter", ""], [[0, 1]]),
        (["", ""], [[0, 1]]),
        ([], []),
    ],
)
def test_word_groups(pieces: list[str], groups: list[list[int]]) -> None:
    assert word_groups(pieces) == groups
    assert sorted(i for g in groups for i in g) == list(range(len(pieces)))


def test_word_of() -> None:
    pieces = [" Sch", "meichel", " is", " goal", "keeper", "."]
    assert [word_of(pieces, g) for g in word_groups(pieces)] == ["Schmeichel", "is", "goalkeeper", "."]


def test_a_list_marker_is_not_a_sentence_of_its_own() -> None:
    from active_rag.text import first_sentence_end

    text = "1. Identify the father. 2. Then"
    assert text[: first_sentence_end(text)] == "1. Identify the father."
    assert first_sentence_end("1. Identify") is None
