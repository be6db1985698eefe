"""Routers decide, before generating, whether a question needs retrieval at all.

- :class:`TaAreRouter`: TA-ARE, Time-Aware Adaptive REtrieval (Zhang et al. 2024, §4): the prompt tells
  the model today's date and shows 2 [Yes] and 2 [No] demonstrations; optionally the [Yes]
  demonstrations are the two most similar questions of a pool (the paper uses SimCSE).
- :class:`VanillaRouter`: the same instruction without date or demonstrations (the paper's baseline).

Prompts are the authors' exact templates (``data/ta_are_prompts.json``), wrapped in the model's chat
template. Both return a :class:`~active_rag.types.RouteDecision` with the raw model output. The output is
read as the authors' code reads it (:func:`authors_decision`: retrieve iff a word is "yes"/"[yes]"), so the
harness aggregates the paper's reading; ``parse="first-verdict"`` reads the first [Yes]/[No] instead.
"""

from __future__ import annotations

import datetime as _dt
import functools
import itertools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UnknownNameError
from ..types import RouteDecision
from ..validation import check_date, check_int

if TYPE_CHECKING:  # pragma: no cover
    from ..decoding.model import ActiveLM

_PROMPTS_FILE = Path(__file__).parents[1] / "data" / "ta_are_prompts.json"


@functools.lru_cache(maxsize=1)
def ta_are_resources() -> dict[str, Any]:
    """The authors' templates and demonstrations (RetrievalQA ``utils.py`` @ f26134c)."""
    return json.loads(_PROMPTS_FILE.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Demonstration:
    question: str
    needs_retrieval: bool

    def render(self) -> str:
        return f"Question: {self.question}\nAnswer: {'[Yes]' if self.needs_retrieval else '[No]'}.\n\n"


def default_demonstrations() -> list[Demonstration]:
    return [Demonstration(d["question"], bool(d["needs_retrieval"])) for d in ta_are_resources()["demonstrations"]]


def parse_decision(output: str) -> bool | None:
    """``True`` for [Yes] (retrieve), ``False`` for [No]; the first verdict in the output wins; ``None`` if neither."""
    m = re.search(r"\[\s*(yes|no)\s*\]|\b(yes|no)\b", output, re.IGNORECASE)
    if not m:
        return None
    return (m.group(1) or m.group(2)).lower() == "yes"


_AUTHORS_YES = frozenset({'"yes"', "'yes'", '["yes"]', "['yes']", "[yes]", "yes"})


def authors_decision(output: str) -> bool:
    """Whether a router's output asks to retrieve, exactly as RetrievalQA's code reads it.

    github.com/hyintell/RetrievalQA ``utils.postprocess_output`` (newlines become spaces) then
    ``utils.check_string_exist``: remove commas, periods and double quotes, split on spaces, lowercase and
    strip each word; retrieve when any word is ``yes``, ``[yes]``, ``'yes'`` or ``['yes']``. Anything else,
    an unreadable output included, means no retrieval. So "[Yes]." and "Yes, I need to" retrieve; "[No]",
    "Yes!" and "I don't know" do not."""
    cleaned = output.replace("\n", " ").replace(",", "").replace(".", "").replace('"', "")
    return bool({w.lower().strip() for w in cleaned.split(" ")} & _AUTHORS_YES)


PARSERS = ("authors", "first-verdict")

Embedder = Callable[[list[str]], Sequence[Sequence[float]]]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a)) or 1.0
    nb = math.sqrt(sum(y * y for y in b)) or 1.0
    return dot / (na * nb)


class _PromptRouter:
    name = "router"
    template_key = ""

    def __init__(self, model: ActiveLM, *, max_new_tokens: int = 8, default: bool = True, parse: str = "authors") -> None:
        if parse not in PARSERS:
            raise UnknownNameError("router output parser", parse, PARSERS)
        self.parse = parse
        self.model = model
        self.max_new_tokens = check_int(f"{self.name} router max_new_tokens", max_new_tokens, minimum=1)
        self.default = default

    def prompt(self, question: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def decide(self, question: str) -> RouteDecision:
        """Ask the model. ``parse="authors"`` (default): :func:`authors_decision`; ``"first-verdict"``: the first
        [Yes]/[No] (:func:`parse_decision`), an output with neither falling back to ``default`` (retrieve)."""
        prompt = self.prompt(question)
        raw = self.model.complete(prompt, max_new_tokens=self.max_new_tokens)
        if self.parse == "authors":
            retrieve = authors_decision(raw)
        else:
            verdict = parse_decision(raw)
            retrieve = self.default if verdict is None else verdict
        return RouteDecision(retrieve=retrieve, router=self.name, raw_output=raw, prompt=prompt)


class VanillaRouter(_PromptRouter):
    """The vanilla adaptive-retrieval prompt of RetrievalQA (§3): instruction only."""

    name = "vanilla"

    def prompt(self, question: str) -> str:
        return ta_are_resources()["prompt_templates"]["openai_chat_adaptive_retrieval"].format(question=question)


class TaAreRouter(_PromptRouter):
    """TA-ARE (Zhang et al. 2024, §4 and Figure 6): "Today is {date}." + the instruction + 4 demonstrations.

    With ``pool`` and ``embed``, the two [Yes] demonstrations are the pool's questions that need
    retrieval and are most similar to the asked question (the paper picks them with SimCSE); the two
    [No] demonstrations stay the authors' fixed ones."""

    name = "ta-are"

    def __init__(
        self,
        model: ActiveLM,
        *,
        today: _dt.date | str | None = None,
        demonstrations: Sequence[Demonstration] | None = None,
        pool: Sequence[Demonstration] | None = None,
        embed: Embedder | None = None,
        n_yes: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.today = None if today is None else check_date("today", today)  # InvalidOptionError for "notadate"
        self.demonstrations = list(demonstrations) if demonstrations is not None else default_demonstrations()
        self.pool = [d for d in (pool or []) if d.needs_retrieval]
        self.embed = embed
        self.n_yes = check_int("n_yes", n_yes, minimum=0)
        if self.pool and self.embed is None:
            raise ValueError("TaAreRouter(pool=...) needs embed=: a function mapping a list of texts to vectors.")
        self._pool_vectors = [list(v) for v in self.embed([d.question for d in self.pool])] if self.pool and self.embed else []

    def today_text(self) -> str:
        if self.today is None:
            return _dt.date.today().strftime("%Y-%m-%d")
        return self.today if isinstance(self.today, str) else self.today.strftime("%Y-%m-%d")

    def choose_demonstrations(self, question: str) -> list[Demonstration]:
        if not self.pool or self.embed is None:
            return self.demonstrations
        q = list(self.embed([question])[0])
        asked = question.strip().lower()
        ranked = sorted(range(len(self.pool)), key=lambda i: -_cosine(q, self._pool_vectors[i]))
        ranked = [i for i in ranked if self.pool[i].question.strip().lower() != asked]  # never the question itself
        yes = [self.pool[i] for i in ranked[: self.n_yes]]
        # a pool smaller than n_yes is topped up with the fixed [Yes] demonstrations
        yes += [d for d in self.demonstrations if d.needs_retrieval and d not in yes][: self.n_yes - len(yes)]
        no = [d for d in self.demonstrations if not d.needs_retrieval]
        chosen: list[Demonstration] = []
        for pair in itertools.zip_longest(no, yes):  # alternate [No], [Yes] as the authors' fixed set does
            chosen.extend(d for d in pair if d is not None)
        return chosen

    def prompt(self, question: str) -> str:
        fewshot = "".join(d.render() for d in self.choose_demonstrations(question))
        template = ta_are_resources()["prompt_templates"]["openai_chat_adaptive_retrieval_TAARE"]
        return template.format(today=self.today_text(), fewshot_examples=fewshot, question=question)


ROUTERS: dict[str, type[_PromptRouter]] = {"ta-are": TaAreRouter, "vanilla": VanillaRouter}


def make_router(name: str | None, model: ActiveLM, **kwargs: Any) -> _PromptRouter | None:
    """``"ta-are"``, ``"vanilla"``, or ``None``/``"none"`` for no router."""
    if name is None or name == "none":
        return None
    if name not in ROUTERS:
        raise UnknownNameError("router", name, [*ROUTERS, "none"])
    return ROUTERS[name](model, **kwargs)
