"""The answer stage: how a method finishes its answer once the trigger and the query formulator are done.

A method is a trigger ("when", :mod:`active_rag.components.triggers`), a query formulator ("what",
:mod:`active_rag.components.queries`), a context policy ("what the prompt keeps", :mod:`active_rag.components.context`) and
this stage, which says what happens around the answer itself:

- ``phrase``: the phrase forced when the answer ends without it (DRAGIN, Su et al. 2024, App. B: "So the answer
  is"; :func:`resolve_answer_phrase`);
- ``check``: look again at the finished answer when a token of it is unsure
  (:class:`~active_rag.answer.check.AnswerCheck`);
- ``reanswer``: answer again from the first word with every passage held, once a retrieval after the first token
  added any;
- ``options``: a choice question ("Which ..., A or B?") is answered with one of its options
  (:mod:`active_rag.answer.options`);
- ``links``: before the first token, add the own articles of the names the question's passages mention
  (:mod:`active_rag.answer.links`); ``"choose"`` decides per question (:mod:`active_rag.answer.read_choice`);
- ``dates``: a choice question that compares two things in time ("Which film came out first, A or B?") is answered
  by the dates the reader wrote in its reasoning, compared without the model (:mod:`active_rag.answer.dates`);
- ``versions``: a choice question that asks which of two things has the newer (or older) version ("Which requires a
  newer minimum Python version, typer or Pygments?") is answered by the versions the reader wrote, compared as
  numbers (:mod:`active_rag.answer.versions`);
- ``each_name``: a "yes" to "Are both A and B P?" stands only when the reader says "yes" to "Is A P?" and to "Is B
  P?", asked with the same passages (:mod:`active_rag.answer.both_names`);
- ``same``: "Do A and B have the same X?" is answered by comparing the X the reader names for A and for B, asked
  with the same passages (:mod:`active_rag.answer.same_value`).

The papers' methods use none of these but the phrase; the presets beyond the papers
(:data:`active_rag.components.presets.PRESETS`) name the stage they use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InvalidOptionError
from ..answer.check import AnswerCheck, make_answer_check
from ..answer.options import check_options_model
from ..answer.links import check_follow_links

#: The phrase the DRAGIN and FLARE prompts' exemplars end their answers with ("... So the answer is X.").
ANSWER_PHRASE = "So the answer is"


def resolve_answer_phrase(phrase: str | None, answer_check: bool, answer_options: bool) -> str | None:
    """The engine's ``answer_phrase``: ``"auto"`` is :data:`ANSWER_PHRASE` when an answer check or ``answer_options``
    reads the answer span after it (without it the check finds no span and looks again every time), else ``None``;
    anything else as given."""
    if phrase == "auto":
        return ANSWER_PHRASE if answer_check or answer_options else None
    return phrase


@dataclass(frozen=True)
class AnswerStage:
    """What a method does around its answer (see the module docstring); the defaults are the papers'.

    >>> AnswerStage(options=True, links="choose", dates=True, versions=True, each_name=True, same=True)  # ``sr-rag-choose``'s
    AnswerStage(phrase='auto', check=None, reanswer=False, options=True, links='choose', dates=True, versions=True, each_name=True, same=True)
    """

    phrase: str | None = "auto"
    """Forced when the answer ends without it; ``"auto"``: "So the answer is" when ``check`` or ``options`` reads
    the answer span after it, else none; ``None``: never."""
    check: AnswerCheck | bool | float | None = None
    """``None``/``False``: no check; ``True``: :class:`AnswerCheck`'s defaults; a float: that ``theta``."""
    reanswer: bool = False
    options: bool = False
    links: bool | Literal["choose"] = False
    dates: bool = False
    """Settle a comparison of dates with the dates the reader wrote (:func:`~active_rag.answer.dates.settle_dates`):
    the result's ``short_answer`` is the option they choose, and ``date_comparison`` records them."""

    versions: bool | Literal["reasoning"] = False
    """Settle a comparison of versions with the versions the reader wrote
    (:func:`~active_rag.answer.versions.settle_versions`) or, for an option it gave none, the version the
    option's own passage in the prompt states: the result's ``short_answer`` is the option they choose, and
    ``date_comparison`` records them (``event`` ``"version"``). ``"reasoning"``: the reader's versions only. Either
    way a question that asks for a version ("What is the minimum Python version ...?") gets the version its answer
    names as the short answer (:func:`~active_rag.answer.versions.asked_version`, ``event`` ``"version-asked"``)."""

    each_name: bool = False
    """Ask a "both" question's names one by one when the answer is "yes" (:mod:`~active_rag.answer.both_names`):
    the result's ``short_answer`` is what their answers settle, and ``each_name`` records them."""

    same: bool = False
    """Answer "Do A and B have the same X?" by the X the reader names for each (:mod:`~active_rag.answer.same_value`):
    the result's ``short_answer`` is "yes" or "no" as the two compare, and ``each_name`` records them (``rule``
    ``"same"``)."""

    def resolve(self, model: Any, context: Any, retrieves_first: bool) -> ResolvedAnswerStage:
        """This stage checked against the engine it finishes: typed errors for a combination that cannot run."""
        check = make_answer_check(self.check)
        if self.reanswer and check is not None:
            raise InvalidOptionError(
                "reanswer and an answer check both write a second answer: use one (the check keeps the surer answer)."
            )
        options = bool(self.options)
        if options:
            check_options_model(model)
        return ResolvedAnswerStage(
            phrase=resolve_answer_phrase(self.phrase, check is not None, options),
            check=check,
            reanswer=bool(self.reanswer),
            options=options,
            links=check_follow_links(self.links, context, retrieves_first),
            dates=bool(self.dates),
            versions=_versions_rule(self.versions),
            each_name=bool(self.each_name),
            same=bool(self.same),
        )


@dataclass(frozen=True)
class ResolvedAnswerStage:
    """An :class:`AnswerStage` with ``"auto"`` and the check's shorthands resolved (what the engine runs)."""

    phrase: str | None
    check: AnswerCheck | None
    reanswer: bool
    options: bool
    links: bool | str
    dates: bool = False
    versions: Literal[False, "reasoning", "passages"] = False
    each_name: bool = False
    same: bool = False


def _versions_rule(versions: object) -> Literal[False, "reasoning", "passages"]:
    """``AnswerStage.versions`` as the engine runs it: ``"passages"`` (``True``: the reasoning's versions, then the
    options' own passages'), ``"reasoning"`` or ``False``."""
    if versions == "reasoning":
        return "reasoning"
    if versions is True or versions == "passages":
        return "passages"
    if versions is False or versions is None:
        return False
    raise InvalidOptionError(f"versions={versions!r}: use True (the reasoning's versions, then the options' own "
                             "passages'), 'reasoning' (the reasoning's only) or False.")
