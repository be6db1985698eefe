"""Bridge entities (beyond the papers): the names a generated sentence adds to the question, and
whether a passage is an entity's own article.

A multi-hop answer reaches its answer through a bridge: "The film Hypocrite was directed by Miguel Morayta.
Miguel Morayta died on 19 June 2013." (DRAGIN App. F, Prompt 1). The first sentence names the bridge entity
(Miguel Morayta), which the question does not; the second starts with it and reads its own article. The
``next-hop``/``question-entity``/``entity`` query formulators (:mod:`active_rag.components.queries`) and the ``bridge``
trigger (:mod:`active_rag.components.triggers`) use the functions here.
"""

from __future__ import annotations

import re
import unicodedata

from .text import is_content_word, split_sentences
from .types import Passage

__all__ = [
    "capitalised_phrases", "content_words", "entities_of", "generated_entities", "is_article_of", "is_own_passage",
    "same_entity",
]

_WORD = re.compile(r"[^\W_][\w'\-.]*")
_CONNECTORS = frozenset({"of", "de", "von", "the"})
_PARENTHESIS = re.compile(r"\s*\([^)]*\)")
_MONTHS = frozenset("january february march april may june july august september october november december".split())


def _words(text: str) -> list[str]:
    """Lower-cased words without accents ("Ögedei" and "Ogedei" are one word)."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return [w.lower() for w in re.findall(r"\w+", plain)]


def content_words(text: str) -> list[str]:
    """Lower-cased content words (no stop words) without accents, in text order."""
    return [w for w in _words(text) if is_content_word(w) and w not in ("s",)]


def _capitalised_phrases(sentence: str) -> list[str]:
    """The phrases of :func:`capitalised_phrases`, without where they start."""
    return [phrase for phrase, _ in capitalised_phrases(sentence)]


def capitalised_phrases(sentence: str) -> list[tuple[str, int]]:
    """Runs of capitalised words and numbers ("Ögedei Khan", "6 May 1859"), joined by "of", "de", "von" or "the"
    ("Wonjong of Goryeo", "Cup of the Nations"), as they stand in ``sentence``, each with the character offset it
    starts at; punctuation ends a run."""
    words = list(_WORD.finditer(sentence))
    phrases: list[tuple[str, int]] = []
    i = 0
    while i < len(words):
        if not _capitalised(words[i].group(0)):
            i += 1
            continue
        first = last = i
        j = i + 1
        while j < len(words) and not sentence[words[j - 1].end():words[j].start()].strip():
            if _capitalised(words[j].group(0)):
                last = j
            elif words[j].group(0) not in _CONNECTORS:
                break
            j += 1
        phrases.append((sentence[words[first].start():words[last].end()], words[first].start()))
        i = last + 1
    return phrases


def _capitalised(word: str) -> bool:
    return word[0].isupper() or word[0].isdigit()


def entities_of(sentence: str, question: str, names_only: bool = False) -> list[str]:
    """Capitalised phrases and numbers of ``sentence`` that ``question`` does not already name, in text order.
    A phrase counts as named when every content word of it is a word of the question. ``names_only`` keeps
    names: no numbers, no month names, no lone word of one letter ("Q. 1" is not a bridge)."""
    asked = set(_words(question))
    found: list[str] = []
    for phrase in _capitalised_phrases(sentence):
        phrase = phrase.strip(" .,'")
        phrase = re.sub(r"'s$", "", phrase)
        words = content_words(phrase)
        if not words or all(w in asked for w in words):
            continue
        if names_only and (all(w.isdigit() or w in _MONTHS for w in words) or max(map(len, words)) < 2):
            continue
        if phrase not in found:
            found.append(phrase)
    return found


def generated_entities(text: str, question: str, limit: int = 4) -> list[str]:
    """The entities (:func:`entities_of`) of the latest sentence of ``text`` that has any; at most ``limit``."""
    for sentence in reversed(split_sentences(text)):
        found = entities_of(sentence, question)
        if found:
            return found[:limit]
    return []


def same_entity(a: str, b: str) -> bool:
    """The same name, ignoring case, accents and punctuation."""
    return content_words(a) == content_words(b)


def is_own_passage(passage: Passage, entity: str) -> bool:
    """Whether ``passage`` is ``entity``'s own article: its title, without a parenthesis such as "(Film)", has the
    entity's content words, or differs by one word ("Miguel Morayta" and "Miguel Morayta Martinez"); a passage
    without a title counts when its text starts with the entity."""
    name = content_words(entity)
    if not name:
        return False
    title = content_words(_PARENTHESIS.sub("", passage.title or ""))
    if title:
        small, large = sorted((title, name), key=len)
        return set(small) <= set(large) and len(set(large) - set(small)) <= 1 and bool(set(small) & set(name))
    return content_words(passage.text[: 4 * len(entity) + 16])[: len(name)] == name


def is_article_of(passage: Passage, name: str) -> bool:
    """:func:`is_own_passage`, stricter for a one-word name, whose article must be titled with it alone ("American"
    is not "American Scary", "Brooklyn" not "Brooklyn Nine-Nine"; "Glow (film)" is Glow's)."""
    if len(content_words(name)) >= 2:
        return is_own_passage(passage, name)
    return bool(passage.title) and same_entity(_PARENTHESIS.sub("", passage.title or ""), name)
