"""Run settings, and the flat names of a method's parts.

:class:`~active_rag.ActiveRAG` takes a method's components (trigger, query formulator, context policy, prompt,
:class:`~active_rag.components.answer_stage.AnswerStage`, router) and a few numbers; everything else that changes how
one run goes, but not which method it is, is a :class:`RunSettings`.

A preset (:data:`active_rag.components.presets.PRESETS`) is data that names those components. Overriding one field of
them needs no rebuilt component: :func:`engine_kwargs` takes the flat names (``answer_check=1.0``,
``initial_retrieval=True``, the names of :data:`FLAT_NAMES`) and sets that field of the answer stage or the
run settings, keeping the others. :meth:`ActiveRAG.from_preset <active_rag.ActiveRAG.from_preset>`, the command
line, the LangChain runnable (``engine_options``) and the LlamaIndex query engine (``**options``) take them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .answer_stage import AnswerStage
from .profiles import Profile


@dataclass(frozen=True)
class RunSettings:
    """How one run of a method goes: when it may first retrieve, how much, when it stops, how the prompt is laid out.

    >>> RunSettings(initial_retrieval=True)  # FLARE's first retrieval with the input (Jiang et al. 2023, App. A)
    ... # doctest: +ELLIPSIS
    RunSettings(initial_retrieval=True, max_retrievals=None, ...)
    """

    initial_retrieval: bool = False
    """Retrieve with the input before the first token (FLARE App. A), whatever the trigger."""
    max_retrievals: int | None = None
    """Cap on retrievals a question; ``None``: no cap (the generated-token guard, 4 x ``max_new_tokens``, stops
    runaways)."""
    stop: Callable[[str], bool] | None = None
    """Stop generating once ``stop(output_text)`` is true (evaluation stops at a completed answer)."""
    prompt_mode: str = "auto"
    """How the prompt is laid out (:mod:`active_rag.components.prompt_layout`); ``"auto"``: the model's default."""
    repetition_guard: bool = True
    """Stop when the model starts a sentence it already wrote (:mod:`active_rag.stopping`)."""
    stop_when_answered: bool = True
    """Stop after the sentence that completes "So the answer is ..."."""
    keep_attention: bool = False
    """Keep every token's attention row in the result (for plots; memory grows with the output)."""
    profile: str | Profile | None = None
    """A DRAGIN Table 9 profile (:mod:`active_rag.components.profiles`): the threshold a trigger falls back to."""
    method: str | None = None
    """The method's name in results and traces; ``None``: ``"<trigger>+<query>"``."""


#: the flat names :func:`engine_kwargs` accepts: name -> (component, field)
FLAT_NAMES: dict[str, tuple[str, str]] = {
    "answer_phrase": ("answer", "phrase"),
    "answer_check": ("answer", "check"),
    "reanswer": ("answer", "reanswer"),
    "answer_options": ("answer", "options"),
    "follow_links": ("answer", "links"),
    "settle_dates": ("answer", "dates"),
    "settle_versions": ("answer", "versions"),
    "ask_each_name": ("answer", "each_name"),
    "ask_same": ("answer", "same"),
    **{f.name: ("settings", f.name) for f in dataclasses.fields(RunSettings)},
}

_COMPONENTS = {"answer": AnswerStage, "settings": RunSettings}


def engine_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` for :class:`~active_rag.ActiveRAG`, with every flat name (:data:`FLAT_NAMES`) set as its field
    of ``answer`` / ``settings`` (taken from ``kwargs`` when given there, else the defaults) and the other keys
    as they are.

    >>> engine_kwargs({"top_k": 6, "answer_options": True, "initial_retrieval": True})  # doctest: +ELLIPSIS
    {'top_k': 6, 'answer': AnswerStage(..., options=True, ...), 'settings': RunSettings(initial_retrieval=True, ...)}
"""
    out = {k: v for k, v in kwargs.items() if k not in FLAT_NAMES}
    fields: dict[str, dict[str, Any]] = {}
    for name, value in kwargs.items():
        if name in FLAT_NAMES:
            component, field = FLAT_NAMES[name]
            fields.setdefault(component, {})[field] = value
    for component, changes in fields.items():
        base = out.get(component) or _COMPONENTS[component]()
        if not isinstance(base, _COMPONENTS[component]):
            raise TypeError(f"{component} must be a {_COMPONENTS[component].__name__}; got {type(base).__name__}.")
        out[component] = dataclasses.replace(base, **changes)
    return out
