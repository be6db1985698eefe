"""Reading the final answer out of a chain-of-thought generation, the DRAGIN way.

DRAGIN (Su et al., 2024), appendix B "Evaluation Details": the exemplars end with "So the answer is X.";
if "So the answer is" is absent from the model's generation, the evaluation appends "So the answer is" to
the output and lets the model continue; the words after "So the answer is" are the final answer.

* :func:`extract_answer` returns the text after the last "the answer is" (case-insensitive, so "So the answer
  is" and "Therefore, the answer is" both count), or None when there is none (the engine then appends
  :data:`ANSWER_PHRASE` and continues: :func:`needs_answer_prompt`).
* :func:`retrievalqa_decision` reads a router's "[Yes]"/"[No]" output the way RetrievalQA's code does: it is
  the router's own reading, :func:`active_rag.components.routing.authors_decision`.

When the answer sentence is finished, so that generation may stop, is a stop rule of the engine:
:func:`active_rag.stopping.has_completed_answer`.
"""

from __future__ import annotations

import re

from active_rag.components.routing import authors_decision

__all__ = [
    "ANSWER_PHRASE",
    "ANSWER_PHRASE_RE",
    "extract_answer",
    "needs_answer_prompt",
    "retrievalqa_decision",
]

#: The phrase every exemplar answer ends with, and the one the engine appends when it is missing.
ANSWER_PHRASE = "So the answer is"

#: "the answer is" as words, any case and spacing ("So the answer is", "Thus, THE ANSWER IS"), also "the final
#: answer is" (self-ask's "So the final answer is:"); not "the answer isn't" (word boundary after "is").
ANSWER_PHRASE_RE = re.compile(r"\bthe\s+(?:final\s+)?answer\s+is\b", re.IGNORECASE)

_TRAILING_JUNK = ("</s>", "<|endoftext|>", "<|eot_id|>", "<|im_end|>")
_DOUBLE_QUOTES = "\"“”„«»"
_SINGLE_QUOTES = ("'", "'"), ("‘", "’")


def _clean(answer: str) -> str:
    answer = answer.strip()
    changed = True
    while changed and answer:
        changed = False
        for junk in _TRAILING_JUNK:
            if answer.endswith(junk):
                answer = answer[: -len(junk)].rstrip()
                changed = True
        stripped = answer.strip().strip(_DOUBLE_QUOTES).strip().rstrip(".").strip()
        for opening, closing in _SINGLE_QUOTES:
            if len(stripped) >= 2 and stripped[0] == opening and stripped[-1] == closing:
                stripped = stripped[1:-1].strip()
        if stripped != answer:
            answer = stripped
            changed = True
    return answer


def extract_answer(text: str) -> str | None:
    """The final answer of a generation: the text after the last "the answer is", cleaned; None when absent.

    Case-insensitive, so "So the answer is", "so The Answer Is", "Therefore, the answer is" and self-ask's
    "So the final answer is:" all count; when
    the phrase occurs several times the last one wins. The answer runs to the end of its first non-empty line; a leading ":",
    surrounding whitespace, double quotes (straight or curly), a pair of enclosing single quotes, trailing
    periods and end-of-text tokens such as ``</s>`` are removed ("So the answer is "Paris"." -> "Paris").
    None when the phrase is absent or nothing follows it (the engine then appends :data:`ANSWER_PHRASE` and
    continues, as in DRAGIN appendix B).
    """
    matches = list(ANSWER_PHRASE_RE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end():].lstrip(" \t:\n")  # "So the answer is:\n\nX" answers X
    rest = rest.split("\n", 1)[0]
    answer = _clean(rest)
    return answer or None


def needs_answer_prompt(text: str) -> bool:
    """True when the generation holds no answer ("the answer is" + text): append the phrase and continue."""
    return extract_answer(text) is None


#: Whether a router's output asks to retrieve, as RetrievalQA's code reads it (``postprocess_output`` then
#: ``check_string_exist``): the routers' own reading, :func:`active_rag.components.routing.authors_decision`.
retrievalqa_decision = authors_decision
