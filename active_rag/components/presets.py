"""The papers' methods, and the few configurations beyond them that the evidence keeps, by name. Each preset is a trigger + query formulator + prompt + first-retrieval
choice; any field can be overridden, and any trigger can be combined with any query formulator.

The thresholds of ``flare`` and ``dragin`` are ``"auto"``: the model's calibrated threshold when one is
cached (``active-rag calibrate``, :mod:`active_rag.engine.calibration`), else the profile's (DRAGIN Table 9) or the
paper's default. A profile (:mod:`active_rag.components.profiles`) also sets DRAGIN's segment length, QFS ``top_n``
and the answer length.

Every paper preset uses the ``replace`` context policy (:mod:`active_rag.components.context`), exact per method. Where a
preset departs from its source:

- ``flare``: FLARE-direct as §3 and App. A (input retrieval first, look-ahead without documents, masked query,
  beta 0.4); theta is the paper's 0.8 unless a calibration for the model is cached.
- ``flare-instruct``: the ``[Search(query)]`` tag is removed from the answer and its documents stay until the
  next search; the paper's exemplar-taught search-call format is replaced by the instruction and the ``[`` bias.
- ``dragin``: truncates at the start of the triggering word (the paper's Eq. 6); the released code truncates
  the whole sentence (``dragin-code``). The regenerated sentence is accepted unchecked, then generation is
  checked again without documents, as the released code does.
- ``dragin-code``: truncates at the start of the hallucinated sentence and keeps every sentence before it; the
  released code's ``sentences[:sid-1]`` also drops the sentence just before it, an off-by-one not copied here.
- beyond the papers: ``look-again-grounded`` checks the finished answer and looks again
  (:mod:`active_rag.answer.check`); ``sr-rag-linked`` and ``sr-rag-choose`` read the articles the passages
  link to (:mod:`active_rag.answer.links`, :mod:`active_rag.answer.read_choice`); ``look-again-choose`` reads
  them only when the answer from the question's passages is unsure, and nothing more when it is sure. The configurations the evidence
  did not keep (``dragin-accumulate``, ``flare-accumulate``, ``follow-bridge``, ``follow-bridge-reanswer``,
  ``look-again``, ``look-again-next-hop``, ``look-again-linked``, ``look-again-linked-second``) are recipes:
  the ``ActiveRAG(...)`` call that builds each is in docs/recipes.md, and their rows stay under ``results/``.
- the answer phrase: a method that reads the answer span (an answer check: ``look-again-grounded``,
  ``look-again-choose``; ``answer_options``: those two, ``sr-rag-linked``, ``sr-rag-choose``)
  forces "So the answer is" when the model did not write it (an unfinished last sentence is closed first; DRAGIN App. B;
  :class:`~active_rag.components.answer_stage.AnswerStage`'s ``phrase="auto"``), the same in the CLI, Python, LangChain and
  LlamaIndex, so the check always finds the span it reads; the others leave the answer as the model wrote it (docs/api.md,
  "Streaming"). Evaluation forces the phrase for every method, as the
  papers do (:mod:`active_rag.evaluation`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import UnknownNameError
from .settings import RunSettings, engine_kwargs
from ..answer.check import AnswerCheck
from .answer_stage import AnswerStage


@dataclass(frozen=True)
class Preset:
    """A method as data: the components :class:`~active_rag.ActiveRAG` is built from, by name, with their
    settings (:func:`preset_kwargs` builds them)."""

    name: str
    description: str
    trigger: str
    """When to retrieve (:data:`active_rag.components.triggers.TRIGGERS`), with ``trigger_kwargs``."""
    query: str
    """What to retrieve with (:data:`active_rag.components.queries.QUERIES`), with ``query_kwargs``."""
    prompt: str = "dragin"
    context: str = "replace"
    """What the prompt keeps (:mod:`active_rag.components.context`); the papers' methods replace."""
    top_k: int | None = None
    """Passages per retrieval; ``None``: the engine's 3 (DRAGIN Table 9)."""
    answer: AnswerStage = AnswerStage()
    """How the answer is finished (:class:`~active_rag.components.answer_stage.AnswerStage`): the papers' default
    forces no phrase, checks nothing, offers no options and follows no links."""
    settings: RunSettings = RunSettings()
    """The run settings (:class:`~active_rag.components.settings.RunSettings`); the preset's name becomes its ``method``."""
    trigger_kwargs: tuple[tuple[str, Any], ...] = ()
    query_kwargs: tuple[tuple[str, Any], ...] = ()
    source: str = ""
    """The paper or group the preset comes from (:data:`SOURCES`): how ``active-rag methods`` groups them."""
    use_for: str = ""
    """What data and questions the preset is recommended for (README, "Which preset for my data"); what each scored
    is in the docs (docs/presets.md), not here."""


#: ``look-again-choose``'s theta: below it, an answer token sends the question on to read more (chosen on HotpotQA dev
#: and dev-b over the union, with ``ground_draft``: ``python results/choose/stop_estimate.py --sweep``)
LOOK_AGAIN_CHOOSE_THETA = 0.95

_INPUT_FIRST = RunSettings(initial_retrieval=True)  # FLARE App. A: retrieve with the input before the first token

#: the groups ``active-rag methods`` lists the presets in, in order
SOURCES = (
    "baselines (Jiang et al. 2023; Su et al. 2024; Press et al. 2023)",
    "FLARE (Jiang et al. 2023)",
    "DRAGIN (Su et al. 2024)",
    "beyond the papers (chosen on the evidence: docs/presets.md)",
)
_BASE, _FLARE, _DRAGIN, _BEYOND = SOURCES
_PAPER = "reproducing the paper (docs/fidelity.md)"

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("wo-rag", "no retrieval (DRAGIN §4.3)", "never", "input", source=_BASE,
               use_for="questions the model knows; the floor every method is measured against"),
        # six passages (docs/presets.md, "What each scored"); `active-rag eval` keeps --top-k 3 for every method, as
        # the papers compare them
        Preset("sr-rag", "single-round: retrieve once with the question (6 passages), then answer", "once", "input",
               top_k=6, source=_BASE, use_for="one fact a question, yes/no questions on world knowledge"),
        Preset("fl-rag", "fixed length: retrieve every 16 tokens with the previous window (FLARE §4)",
               "fixed-length", "last-tokens", prompt="flare", settings=_INPUT_FIRST, source=_BASE, use_for=_PAPER),
        Preset("fs-rag", "fixed sentence: retrieve every sentence with the previous sentence (IRCoT)",
               "fixed-sentence", "last-sentence", prompt="flare", settings=_INPUT_FIRST, source=_BASE, use_for=_PAPER),
        Preset("self-ask", "question decomposition: retrieve for every 'Follow up:' question (Press et al.)",
               "follow-up", "follow-up", prompt="self-ask", source=_BASE, use_for=_PAPER),
        Preset("flare", "FLARE-direct: look-ahead sentence, retrieve if any token p < 0.8, masked query (beta 0.4)",
               "low-confidence", "masked-sentence", prompt="flare", settings=_INPUT_FIRST,
               trigger_kwargs=(("theta", "auto"),), source=_FLARE, use_for=_PAPER),
        Preset("flare-instruct", "FLARE-instruct: the model writes [Search(query)], '[' biased by +2.0",
               "search-tag", "search-tag", prompt="flare-instruct", settings=_INPUT_FIRST, source=_FLARE,
               use_for=_PAPER),
        Preset("dragin", "DRAGIN: RIND trigger (theta 1.2) + QFS attention query (top 35), truncate and continue",
               "rind", "attention", trigger_kwargs=(("theta", "auto"),), source=_DRAGIN, use_for=_PAPER),
        Preset("dragin-code", "DRAGIN as its released code truncates: drop the whole hallucinated sentence, "
               "regenerate it with the QFS documents", "rind", "attention",
               trigger_kwargs=(("theta", "auto"), ("truncate", "sentence")), source=_DRAGIN,
               use_for="reproducing DRAGIN's released code"),
        Preset("look-again-grounded", "retrieve with the question and answer; when an answer token has p < theta, "
               "add the question's next passages, answer again and keep the answer its own passages contain when only "
               "one of the two does (else the surer one); a choice question is answered with one of its options",
               "once", "input", context="accumulate",
               answer=AnswerStage(check=AnswerCheck(theta=1.0, select="grounded"), options=True),
               source=_BEYOND, use_for="models under 1B on multi-hop questions: a second look at the question's "
               "next passages when the answer is unsure"),
        Preset("sr-rag-linked", "retrieve once with the question, add the articles its passages link to (the names "
               "they mention that the question does not, looked up in the index's names, own articles only), then "
               "answer once, a choice question with one of its options", "once", "input", context="accumulate",
               answer=AnswerStage(options=True, links=True), source=_BEYOND,
               use_for="bridge questions only (sr-rag-choose without the per-question choice)"),
        Preset("sr-rag-choose", "sr-rag-linked that chooses per question what to add to the question's passages: a "
               "comparison of things the question names reads their own articles, any other question the articles "
               "its passages link to (active_rag.answer.read_choice); a comparison of dates or versions is settled by the "
               "dates or versions the reader wrote (active_rag.answer.dates, version_compare), a 'yes' to whether two names both have a property by asking each name "
               "(active_rag.answer.both_names), and whether two names share a value by the value the reader names for each "
               "(active_rag.answer.same_value)", "once", "input", context="accumulate",
               answer=AnswerStage(options=True, links="choose", dates=True, versions=True, each_name=True, same=True),
               source=_BEYOND,
               use_for="recommended (the ask default with a model of 1B parameters or more): questions about things "
               "they only describe, over documents that name what they mention, and comparisons of named things"),
        Preset("look-again-choose", "answer from the question's passages; when an answer token has p < 0.95 or the "
               "answer is not found in those passages, read what sr-rag-choose reads (active_rag.answer.read_choice) "
               "and answer again, keeping the second answer unless it only repeats the draft's passages (the draft and it both "
               "found there, it in none of the added ones); otherwise read nothing more; a comparison of dates or "
               "versions is settled by those the reader wrote, a 'yes' to whether two names both have a property by asking each name, and "
               "whether two names share a value by the value the reader names for each", "once", "input",
               context="accumulate",
               answer=AnswerStage(check=AnswerCheck(theta=LOOK_AGAIN_CHOOSE_THETA, select="new-evidence", query="choose",
                                                    ground_draft=True), options=True, dates=True, versions=True,
                                   each_name=True, same=True),
               source=_BEYOND, use_for="a mix of questions the first passages often answer and bridge questions, over titled "
               "documents: it reads more only where the first answer is unsure or not found in its passages; with "
               "context='focus', models under 1B on multi-hop questions (the ask default with such a model)"),
    )
}

def preset_kwargs(name: str, profile: Any = None, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for :class:`~active_rag.engine.loop.ActiveRAG` that build the named method.

    A DRAGIN Table 9 ``profile`` (name or :class:`~active_rag.components.profiles.Profile`; also taken from
    ``overrides``) sets RIND's segment length, QFS ``top_n`` and ``max_new_tokens`` (RIND's ``theta="auto"`` falls
    back to the profile's theta). ``overrides`` replace components, or set one field of the answer stage or the
    run settings by its flat name (:func:`active_rag.components.settings.engine_kwargs`)."""
    from .profiles import get_profile
    from .queries import make_query
    from .triggers import make_trigger

    if name not in PRESETS:
        raise UnknownNameError("method", name, PRESETS)
    p = PRESETS[name]
    profile = overrides.get("profile", profile)
    if profile is None and isinstance(overrides.get("settings"), RunSettings):
        profile = overrides["settings"].profile
    prof = get_profile(profile) if isinstance(profile, str) else profile
    trigger_kwargs = dict(p.trigger_kwargs)
    query_kwargs = dict(p.query_kwargs)
    settings = dataclasses.replace(p.settings, method=p.name)
    out: dict[str, Any] = {}
    if prof is not None:
        settings = dataclasses.replace(settings, profile=prof)
        out["max_new_tokens"] = prof.generate_length
        if p.trigger == "rind":
            trigger_kwargs["max_tokens"] = prof.generate_length
        if p.query == "attention":
            query_kwargs["top_n"] = prof.top_n
    check = p.answer.check
    answer = dataclasses.replace(p.answer, check=dataclasses.replace(check)) if isinstance(check, AnswerCheck) else p.answer
    base = {
        "trigger": make_trigger(p.trigger, **trigger_kwargs),
        "query": make_query(p.query, **query_kwargs),
        "prompt": p.prompt,
        "context": p.context,
        "answer": answer,
        "settings": settings,
        **({"top_k": p.top_k} if p.top_k is not None else {}),
        **out,
    }
    return engine_kwargs({**base, **overrides})
