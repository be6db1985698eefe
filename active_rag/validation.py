"""Checks of the numeric, date and question arguments shared by the engine, the triggers and the CLI.

Every check raises :class:`~active_rag.errors.InvalidOptionError` (a ``ValueError``) with one sentence that
names the option, the value given and the accepted range, so the CLI can print it as its one-line error.
``name`` is the option as the caller spells it (``"top_k"`` in Python, ``"--top-k"`` on the command line).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import numbers
from typing import Any

from .errors import EmptyQuestionError, InvalidOptionError, QuestionTypeError

__all__ = [
    "MAX_RETRIEVALS_HINT",
    "MAX_TOP_K",
    "TOP_K_HINT",
    "check_date",
    "check_fields",
    "check_int",
    "check_number",
    "check_question",
    "check_query",
    "check_trigger",
]

#: The most passages one retrieval may ask for. The papers use 3 (DRAGIN, FLARE) to 5 (RetrievalQA); 100
#: passages of a typical 100-token paragraph already overflow an 8k-token context, and passages that do not
#: fit are dropped anyway (see ``Retrieval.dropped``), so a larger k only costs retrieval time.
MAX_TOP_K = 100
TOP_K_HINT = "It is the number of passages per retrieval (the papers use 3 to 5)"
MAX_RETRIEVALS_HINT = "0 answers without retrieving"


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, minimum: int, maximum: int | None = None, hint: str = "") -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]``; otherwise :class:`InvalidOptionError`."""
    if not _is_int(value):
        raise InvalidOptionError(f"{name} must be an integer, got {value!r} ({type(value).__name__}){_hint(hint)}")
    if value < minimum or (maximum is not None and value > maximum):
        wanted = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise InvalidOptionError(f"{name} must be {wanted}, got {value}{_hint(hint)}")
    return int(value)


def check_number(
    name: str, value: Any, *, minimum: float | None = None, maximum: float | None = None, hint: str = ""
) -> float:
    """``value`` as a finite ``float`` in ``[minimum, maximum]`` (each bound optional); NaN and infinities fail."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidOptionError(f"{name} must be a number, got {value!r} ({type(value).__name__}){_hint(hint)}")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidOptionError(f"{name} must be a finite number, got {number}{_hint(hint)}")
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        if minimum is not None and maximum is not None:
            wanted = f"between {minimum:g} and {maximum:g}"
        elif minimum is not None:
            wanted = f"at least {minimum:g}"
        else:
            wanted = f"at most {maximum:g}"
        raise InvalidOptionError(f"{name} must be {wanted}, got {number:g}{_hint(hint)}")
    return number


def check_date(name: str, value: Any) -> _dt.date:
    """A ``datetime.date`` or a ``YYYY-MM-DD`` string, as a date."""
    if isinstance(value, _dt.datetime):
        return value.date()
    if isinstance(value, _dt.date):
        return value
    if isinstance(value, str):
        try:
            return _dt.date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise InvalidOptionError(f"{name} must be a date written YYYY-MM-DD (e.g. 2024-03-01), got {value!r}.")


def check_question(question: Any) -> str:
    """The question, stripped; :class:`QuestionTypeError` for a non-string, :class:`EmptyQuestionError` for blank."""
    if not isinstance(question, str):
        raise QuestionTypeError(question)
    if not question.strip():
        raise EmptyQuestionError()
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:  # e.g. a shell argument that was not UTF-8 (surrogate escapes)
        raise InvalidOptionError(
            f"The question is not valid text: character {exc.start + 1} ({question[exc.start]!r}) is not UTF-8. "
            "Pass the question as UTF-8 text."
        ) from exc
    return question.strip()


# Field ranges: thresholds are finite and non-negative (a negative RIND threshold or probability threshold fires at
# the very first token); FLARE's theta is a probability.
_PROBABILITY_THRESHOLDS = {"low-confidence"}


def check_fields(component: Any, *, counts_from: int) -> None:
    """Validate the numeric fields of a trigger or query formulator dataclass: ``theta`` is a threshold, finite and
    at least 0 (a probability, at most 1, for ``low-confidence``), ``beta`` a probability threshold in [0, 1] (FLARE's
    masking), ``max_tokens`` at least 1, every other integer at least ``counts_from`` and every other float finite.
    Fields whose name starts with ``_`` are not checked; a component that is not a dataclass is not checked."""
    if not dataclasses.is_dataclass(component):
        return
    owner = getattr(component, "name", type(component).__name__)
    for f in dataclasses.fields(component):
        if f.name.startswith("_"):
            continue
        value = getattr(component, f.name)
        label = f"{owner} {f.name}"
        kind = str(f.type)
        if f.name == "theta":
            maximum = 1.0 if owner in _PROBABILITY_THRESHOLDS else None
            hint = (
                "It is a token probability threshold (FLARE uses 0.8)" if maximum
                else "It is a RIND threshold (DRAGIN uses 1.2)"
            )
            check_number(label, value, minimum=0.0, maximum=maximum, hint=hint)
        elif f.name == "beta":
            check_number(label, value, minimum=0.0, maximum=1.0, hint="It masks tokens whose probability is below it (FLARE uses 0.4)")
        elif f.name == "max_tokens":
            check_int(label, value, minimum=1, hint="It is the longest segment generated between two checks")
        elif kind in ("int", "<class 'int'>"):
            check_int(label, value, minimum=counts_from)
        elif kind in ("float", "<class 'float'>"):
            check_number(label, value)


def check_trigger(trigger: Any) -> None:
    """:func:`check_fields` for a trigger: its counts (``max_follows``, ``forbid_tokens``) may be 0."""
    check_fields(trigger, counts_from=0)


def check_query(formulator: Any) -> None:
    """:func:`check_fields` for a query formulator: its counts (``n``, ``top_n``, ``max_questions``,
    ``max_new_tokens``) are at least 1."""
    check_fields(formulator, counts_from=1)


def _hint(hint: str) -> str:
    return f". {hint}." if hint else "."
