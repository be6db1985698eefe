"""The papers' methods by name. Each preset is a trigger + query formulator + prompt + first-retrieval
choice; any field can be overridden, and any trigger can be combined with any query formulator.

The thresholds of ``flare`` and ``dragin`` are ``"auto"``: the model's calibrated threshold when one is
cached (``active-rag calibrate``, :mod:`active_rag.methods.calibration`), else the profile's (DRAGIN Table 9) or the
paper's default. A profile (:mod:`active_rag.methods.profiles`) also sets DRAGIN's segment length, QFS ``top_n``
and the answer length.

Every paper preset uses the ``replace`` context policy (:mod:`active_rag.methods.context`), exact per method. Where a
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
- beyond the papers: ``dragin-accumulate`` and ``flare-accumulate`` keep every retrieval's passages
  (``accumulate``); ``follow-bridge`` follows the bridge entity a sentence names (the ``bridge`` trigger and the
  ``entity`` query: :mod:`active_rag.entities`); the ``look-again-*`` presets check the finished answer and look
  again (:mod:`active_rag.methods.answer_check`); ``look-again-linked`` and ``sr-rag-linked`` read the articles the
  passages link to (:mod:`active_rag.methods.linked`).
- the answer phrase: a method that reads the answer span (an answer check: the ``look-again-*`` presets;
  ``answer_options``: ``look-again-grounded``, ``-next-hop``, ``-linked``, ``-linked-second``, ``sr-rag-linked``)
  forces "So the answer is" when the model did not write it (an unfinished last sentence is closed first; DRAGIN App. B;
  :class:`~active_rag.ActiveRAG`'s ``answer_phrase="auto"``), the same in the CLI, Python, LangChain and
  LlamaIndex, so the check always finds the span it reads; the others leave the answer as the model wrote it (docs/api.md,
  "Streaming"). Evaluation forces the phrase for every method, as the
  papers do (:mod:`active_rag.evaluation`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UnknownNameError


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    trigger: str
    query: str
    prompt: str = "dragin"
    initial_retrieval: bool = False
    trigger_kwargs: tuple[tuple[str, Any], ...] = ()
    query_kwargs: tuple[tuple[str, Any], ...] = ()
    context: str = "replace"
    """What the prompt keeps (:mod:`active_rag.methods.context`); the papers' methods replace."""
    top_k: int | None = None
    """Passages per retrieval; ``None``: the engine's 3 (DRAGIN Table 9)."""
    reanswer: bool = False
    """Answer again from the first word with every passage held, once a retrieval after the first token added any."""
    answer_check: float | None = None
    """Check the finished answer (:class:`~active_rag.methods.answer_check.AnswerCheck` with this ``theta``): when unsure,
    add the question's next passages, answer again and keep the surer answer."""
    answer_select: str = "min"
    """Which answer the check keeps (:class:`~active_rag.methods.answer_check.AnswerCheck` ``select``)."""
    answer_options: bool = False
    """A choice question's answer is one of its options (:mod:`active_rag.methods.answer_options`)."""
    answer_query: str = "question"
    """What the check's second look retrieves with (:class:`~active_rag.methods.answer_check.AnswerCheck` ``query``)."""
    follow_links: bool | str = False
    """Before the first token, add the own articles of the names the question's passages mention;
    ``"choose"``: by the question's form (:func:`active_rag.methods.linked.check_follow_links`)."""


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("wo-rag", "no retrieval (DRAGIN §4.3)", "never", "input"),
        # six passages: on the first 50 HotpotQA dev questions F1 37.4 against 27.1 with three (docs/context.md);
        # `active-rag eval` keeps --top-k 3 for every method, as the papers compare them
        Preset("sr-rag", "single-round: retrieve once with the question (6 passages), then answer", "once", "input",
               top_k=6),
        Preset("fl-rag", "fixed length: retrieve every 16 tokens with the previous window (FLARE §4)",
               "fixed-length", "last-tokens", prompt="flare", initial_retrieval=True),
        Preset("fs-rag", "fixed sentence: retrieve every sentence with the previous sentence (IRCoT)",
               "fixed-sentence", "last-sentence", prompt="flare", initial_retrieval=True),
        Preset("self-ask", "question decomposition: retrieve for every 'Follow up:' question (Press et al.)",
               "follow-up", "follow-up", prompt="self-ask"),
        Preset("flare", "FLARE-direct: look-ahead sentence, retrieve if any token p < 0.8, masked query (beta 0.4)",
               "low-confidence", "masked-sentence", prompt="flare", initial_retrieval=True,
               trigger_kwargs=(("theta", "auto"),)),
        Preset("flare-instruct", "FLARE-instruct: the model writes [Search(query)], '[' biased by +2.0",
               "search-tag", "search-tag", prompt="flare-instruct", initial_retrieval=True),
        Preset("dragin", "DRAGIN: RIND trigger (theta 1.2) + QFS attention query (top 35), truncate and continue",
               "rind", "attention", trigger_kwargs=(("theta", "auto"),)),
        Preset("dragin-code", "DRAGIN as its released code truncates: drop the whole hallucinated sentence, "
               "regenerate it with the QFS documents", "rind", "attention",
               trigger_kwargs=(("theta", "auto"), ("truncate", "sentence"))),
        # beyond the papers (docs/context.md): chosen on the first 50 HotpotQA dev questions
        Preset("dragin-accumulate", "DRAGIN that first retrieves with the question and whose prompt keeps the distinct "
               "passages of every retrieval (at most 6, oldest leave first); each QFS query asks for passages the "
               "prompt does not hold yet", "rind", "attention", initial_retrieval=True,
               trigger_kwargs=(("theta", "auto"),), context="accumulate"),
        Preset("flare-accumulate", "FLARE-direct whose prompt keeps the distinct passages of every retrieval (at most 6, "
               "oldest leave first); each masked query asks for passages the prompt does not hold yet",
               "low-confidence", "masked-sentence", prompt="flare", initial_retrieval=True,
               trigger_kwargs=(("theta", "auto"),), context="accumulate"),
        Preset("follow-bridge", "retrieve with the question; after each sentence that names an entity the question "
               "does not, add that entity's own article to the prompt and start the next sentence with its name "
               "(at most 2 hops)", "bridge", "entity", initial_retrieval=True, context="accumulate"),
        Preset("follow-bridge-reanswer", "follow-bridge to find the evidence, then answer again from the first word "
               "with the question's passages and every bridge article the prompt holds", "bridge", "entity",
               initial_retrieval=True, context="accumulate", reanswer=True),
        Preset("look-again", "retrieve with the question and answer; when an answer token has p < theta, add the "
               "question's next passages, answer again and keep the answer the model is surer of", "once", "input",
               context="accumulate", answer_check=1.0),
        Preset("look-again-grounded", "look-again that keeps the answer its own passages contain when only one of the "
               "two does (else the surer one), and answers a choice question with one of its options", "once", "input",
               context="accumulate", answer_check=1.0, answer_select="grounded", answer_options=True),
        Preset("look-again-next-hop", "look-again-grounded whose second look retrieves with the question and the draft "
               "answer (the bridge entity it names finds the next hop) instead of the question alone", "once", "input",
               context="accumulate", answer_check=1.0, answer_select="grounded", answer_options=True,
               answer_query="draft"),
        Preset("look-again-linked", "look-again-grounded whose second look reads the articles the draft's passages "
               "link to (the names they mention that the question does not, looked up in the index's names, own articles only)",
               "once", "input", context="accumulate", answer_check=1.0, answer_select="grounded", answer_options=True,
               answer_query="linked"),
        Preset("look-again-linked-second", "look-again-linked that keeps the second answer (its prompt holds the "
               "linked articles too) unless only the draft is found in its own passages", "once", "input",
               context="accumulate", answer_check=1.0, answer_select="grounded-second", answer_options=True,
               answer_query="linked"),
        Preset("sr-rag-linked", "retrieve once with the question, add the articles its passages link to (the names "
               "they mention that the question does not, looked up in the index's names, own articles only), then answer once, a "
               "choice question with one of its options: look-again-linked's second answer without the draft",
               "once", "input", context="accumulate", answer_options=True, follow_links=True),
        Preset("sr-rag-choose", "sr-rag-linked that chooses per question what to add to the question's passages: a "
               "comparison of things the question names reads their own articles, any other question the articles "
               "its passages link to (active_rag.methods.read_choice)", "once", "input", context="accumulate",
               answer_options=True, follow_links="choose"),
    )
}


def preset_kwargs(name: str, profile: Any = None) -> dict[str, Any]:
    """Keyword arguments for :class:`~active_rag.loop.ActiveRAG` that build the named method, with a DRAGIN
    Table 9 ``profile`` (name or :class:`~active_rag.methods.profiles.Profile`) applied when given: RIND's segment
    length, QFS ``top_n`` and ``max_new_tokens`` (RIND's ``theta="auto"`` falls back to the profile's theta)."""
    from .answer_check import AnswerCheck
    from .profiles import get_profile
    from .queries import make_query
    from .triggers import make_trigger

    if name not in PRESETS:
        raise UnknownNameError("method", name, PRESETS)
    p = PRESETS[name]
    prof = get_profile(profile) if isinstance(profile, str) else profile
    trigger_kwargs = dict(p.trigger_kwargs)
    query_kwargs = dict(p.query_kwargs)
    out: dict[str, Any] = {}
    if prof is not None:
        out["profile"] = prof
        out["max_new_tokens"] = prof.generate_length
        if p.trigger == "rind":
            trigger_kwargs["max_tokens"] = prof.generate_length
        if p.query == "attention":
            query_kwargs["top_n"] = prof.top_n
    return {
        "trigger": make_trigger(p.trigger, **trigger_kwargs),
        "query": make_query(p.query, **query_kwargs),
        "prompt": p.prompt,
        "initial_retrieval": p.initial_retrieval,
        "context": p.context,
        "method": p.name,
        **({"top_k": p.top_k} if p.top_k is not None else {}),
        **({"reanswer": True} if p.reanswer else {}),
        **({"answer_check": AnswerCheck(theta=p.answer_check, select=p.answer_select, query=p.answer_query)}
           if p.answer_check is not None else {}),
        **({"answer_options": True} if p.answer_options else {}),
        **({"follow_links": p.follow_links} if p.follow_links else {}),
        **out,
    }
