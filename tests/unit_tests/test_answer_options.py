"""Answering a choice question with one of its options (``answer_options``) and the ``grounded`` answer check
(issue 28, ``look-again-grounded``). The constraint runs on the tiny random Llama with its real BPE tokenizer (a
random model never names an option on its own); the answer check on the scripted word-level model of test_loop."""

from __future__ import annotations

import math

import pytest
import torch

from active_rag import ActiveRAG, AnswerStage
from active_rag.answer.check import AnswerCheck, answer_confidence, answer_span, grounded_in
from active_rag.answer.options import OptionsConstraint, question_options
from active_rag.evaluation.config import EvalConfig, build_methods
from active_rag.components.presets import PRESETS, preset_kwargs
from active_rag.types import TokenEvent, TokenStep
from tests.unit_tests.test_answer_check import A, B, C, D, QUESTION, Ranked
from tests.unit_tests.test_loop import ScriptedLM, words
from tests.recipes import recipe


# -- the options a question offers -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("question", "options"),
    [
        ("Who is older, Annie Morton or Terry Richardson?", ("Annie Morton", "Terry Richardson")),
        ("Which film has the director who is older, Trader Tom Of The China Seas or Lykkens Musikanter?",
         ("Trader Tom Of The China Seas", "Lykkens Musikanter")),
        ("Which film has the director who died later, The More The Merrier or Sleep, My Love?",
         ("The More The Merrier", "Sleep, My Love")),
        ("Which film has the director who was born earlier, Angélique, Marquise Des Anges or That Man George?",
         ("Angélique, Marquise Des Anges", "That Man George")),
        ("Was David Fennario or Peter Emanuel Falck born first?", ("David Fennario", "Peter Emanuel Falck")),
        ("Which magazine was started first Arthur's Magazine or First for Women?", ("Arthur's Magazine", "First for Women")),
        ("Which band, Hole or Bush, has more members?", ("Hole", "Bush")),
        ("Which film whose director is younger, Law Of The Wolf or Joe + Belle?", ("Law Of The Wolf", "Joe + Belle")),
        ("Which was founded first, Tesla or Ford?", ("Tesla", "Ford")),
        # the list's comma bounds the first option: not "Paris, the Seine"
        ("Which river flows through Paris, the Seine or the Loire?", ("the Seine", "the Loire")),
        ("Which writer was from England, Henry Roth or Robert Erskine Childers?", ("Henry Roth", "Robert Erskine Childers")),
        ("Which novelist wrote under the pen name Walter Ericson: Laura Esquivel or Howard Fast?",
         ("Laura Esquivel", "Howard Fast")),
        ("Which of these battles occurred earlier--the Battle of Peleliu or the Battle of Belleau Wood?",
         ("the Battle of Peleliu", "the Battle of Belleau Wood")),
        ("Which game was released first, Icehouse pieces or Kill Doctor Lucky?", ("Icehouse pieces", "Kill Doctor Lucky")),
        ("In which genus number of species are more, Lavatera or Oplismenus?", ("Lavatera", "Oplismenus")),
        ("Did Franki Valli sing with Hellogoodbye or The Four Seasons?", ("Hellogoodbye", "The Four Seasons")),
        ("Who was born first Mahbub ul Haq or Ibn Arabi?", ("Mahbub ul Haq", "Ibn Arabi")),
        # not a choice: the answer is an amount, a date, a year or a thing, not one of the names
        ("How much does AWS or Azure charge per GB?", ()),
        ("When did the Soviet Union invade Afghanistan or Czechoslovakia?", ()),
        ("Which year did Tesla or Ford go public?", ()),
        ("What color do people wear during Oranjegekte or Koningsdag?", ()),
        ("Where was the husband of Octavie Coudreau born?", ()),  # no options
        ("Is it a genus or a species?", ()),  # the sides are not names
        ("Was A or B or C first?", ()),  # more than two
        ("Who is older, Annie Morton or annie morton?", ()),  # the same name twice
    ],
)
def test_the_options_are_the_names_on_each_side_of_or(question: str, options: tuple[str, ...]) -> None:
    assert question_options(question) == options


# -- the constraint on a real tokenizer ------------------------------------------------------------------
OPTIONS = ("Annie Morton", "Terry Richardson")


def _answer_after_phrase(lm, processor, n: int = 12) -> str:
    prompt = lm.encode("Who is older? Let me think. So the answer is")
    session = lm.session(prompt)
    steps = list(session.generate(n, logits_processor=processor))
    return "".join(s.text for s in steps)


def test_after_the_answer_phrase_only_an_option_then_a_period_can_follow(tiny_lm) -> None:
    text = _answer_after_phrase(tiny_lm, OptionsConstraint(tiny_lm, OPTIONS))
    # the option, then its period or the end of the sequence (then free text)
    assert any(text == f" {o}" or text.startswith(f" {o}.") for o in OPTIONS), text
    free = _answer_after_phrase(tiny_lm, None)
    assert not any(free.startswith(f" {o}") for o in OPTIONS)  # the random model alone names neither


def test_the_constraint_is_idle_before_the_phrase_and_keeps_the_raw_log_probabilities(tiny_lm) -> None:
    constraint = OptionsConstraint(tiny_lm, OPTIONS)
    ids = tiny_lm.encode("Who is older? Let me think")
    assert constraint.allowed(ids) is None
    logits = torch.randn(8)
    assert constraint(ids, logits) is logits  # untouched
    phrase = tiny_lm.encode("Who is older? So the answer is")
    first = constraint.allowed(phrase)
    assert first is not None and set(first) == {s[0] for s in constraint.sequences}
    done = constraint.allowed(phrase + list(constraint.sequences[0]))
    assert done is not None and set(done) >= set(tiny_lm.encode("."))
    # the processor steers the choice; the token's log-probability is the model's own distribution
    session = tiny_lm.session(phrase)
    raw = torch.log_softmax(session._next_logits.float(), dim=-1) if session._next_logits is not None else None
    step = next(iter(session.generate(1, logits_processor=constraint)))
    if raw is None:  # the prompt is fed lazily: read the distribution the same way the session does
        reference = tiny_lm.session(phrase)
        reference._feed_pending()
        raw = torch.log_softmax(reference._next_logits.float(), dim=-1)
    assert step.logprob == pytest.approx(float(raw[step.id]), abs=1e-4)
    assert step.id in first


def test_the_engine_answers_a_choice_question_with_an_option(tiny_lm) -> None:
    question = "Who is older, Annie Morton or Terry Richardson?"
    wiki = Ranked([A, B, C])
    common = dict(trigger="once", query="input", max_new_tokens=24, top_k=2)
    phrase, options = AnswerStage(phrase="So the answer is"), AnswerStage(phrase="So the answer is", options=True)
    result = ActiveRAG(tiny_lm, wiki, answer=options, **common).run(question)
    span = answer_span(result.answer)
    assert span is not None and result.answer[span[0]:span[1]] in OPTIONS
    assert result.answer_options == list(OPTIONS) and result.to_dict()["answer_options"] == list(OPTIONS)
    assert ActiveRAG(tiny_lm, wiki, answer=options, **common).describe()["answer_options"] is True
    # no options in the question: the same engine writes what it would without the option
    plain = ActiveRAG(tiny_lm, wiki, answer=phrase, **common).run("Who directed Glow?")
    with_flag = ActiveRAG(tiny_lm, wiki, answer=options, **common).run("Who directed Glow?")
    assert with_flag.answer_options is None and "answer_options" not in with_flag.to_dict()
    assert with_flag.answer == plain.answer and "answer_options" not in ActiveRAG(tiny_lm, wiki, answer=phrase, **common).describe()


# -- the grounded answer check ---------------------------------------------------------------------------
def _steps(text: str, probs: dict[str, float]) -> list[TokenStep]:
    return [TokenStep(id=i, text=" " + w, logprob=math.log(probs.get(w.strip("."), 0.9)), entropy=0.1, position=i)
            for i, w in enumerate(text.split())]


def test_grounded_prefers_the_answer_its_passages_contain() -> None:
    assert grounded_in("Terry Richardson", "Glow was directed by Terry Richardson.")
    assert grounded_in("the Terry Richardson", "terry  richardson!") is True  # SQuAD-normalised
    assert grounded_in("Terry", "Terryville") is False  # whole words
    assert grounded_in("yes", "yes") is None and grounded_in("", "x") is None
    sure_unread = answer_confidence(_steps("So the answer is Glow Smith.", {"Glow": 0.99}))
    unsure_read = answer_confidence(_steps("So the answer is Terry Richardson.", {"Terry": 0.2}))
    passages = ("Annie Morton starred in Glow.", "Glow was directed by Terry Richardson.")
    check = AnswerCheck(select="grounded")
    assert check.keep_second(sure_unread, unsure_read, QUESTION, passages)
    assert not AnswerCheck(select="min").keep_second(sure_unread, unsure_read, QUESTION, passages)
    # both read (or neither, or no passages given): the surer one, as "min"
    assert not check.keep_second(sure_unread, unsure_read, QUESTION, ("Glow Smith", "Terry Richardson"))
    assert not check.keep_second(sure_unread, unsure_read, QUESTION)


def test_grounded_second_keeps_the_second_answer_unless_only_the_draft_is_read() -> None:
    sure = answer_confidence(_steps("So the answer is Glow Smith.", {"Glow": 0.99}))
    unsure = answer_confidence(_steps("So the answer is Terry Richardson.", {"Terry": 0.2}))
    check = AnswerCheck(select="grounded-second")
    both = ("Glow Smith", "Glow Smith. Terry Richardson")
    assert check.keep_second(sure, unsure, QUESTION, both)  # both read: the second, though the draft is surer
    assert not AnswerCheck(select="grounded").keep_second(sure, unsure, QUESTION, both)
    assert not check.keep_second(sure, unsure, QUESTION, ("Glow Smith", "Annie Morton"))  # only the draft read
    assert check.keep_second(unsure, sure, QUESTION, ("Annie Morton", "Glow Smith"))  # only the second read
    no_span = answer_confidence(_steps("I do not know.", {}))
    assert not check.keep_second(sure, no_span, QUESTION) and check.keep_second(no_span, no_span, QUESTION)


@pytest.mark.parametrize("select", ["grounded", "grounded-second"])
def test_a_yes_or_no_draft_stands_under_grounded(select: str) -> None:
    yes = answer_confidence(_steps("So the answer is yes.", {"yes": 0.4}))
    assert not AnswerCheck(select=select).unsure(yes) and AnswerCheck().unsure(yes)
    empty = answer_confidence(_steps("I do not know.", {}))
    assert AnswerCheck(select=select).unsure(empty)  # no answer span: look again


def _reader() -> tuple[ScriptedLM, list[str]]:
    """Without passage C the model is sure of an answer no passage holds; with it, unsure of the right one."""
    prompts: list[str] = []

    def script(prompt: str) -> list:
        prompts.append(prompt)
        if "directed by Terry Richardson" in prompt:
            return words("Glow was directed by Terry Richardson. So the answer is Terry Richardson.", Terry=(0.3, 0.1))
        return words("Glow was directed by Glen Smith. So the answer is Glen Smith.", Glen=(0.6, 0.1))

    return ScriptedLM(script=script), prompts


def test_look_again_grounded_keeps_the_answer_read_in_its_passages() -> None:
    lm, _ = _reader()
    surer = ActiveRAG(lm, Ranked([A, B, C, D]), **recipe("look-again", top_k=2)).run(QUESTION)
    assert surer.answer_check["kept"] == "draft"  # "min": the draft is surer
    lm, prompts = _reader()
    rag = ActiveRAG.from_preset("look-again-grounded", lm, Ranked([A, B, C, D]), top_k=2)
    events = list(rag.stream(QUESTION))
    result = events[-1]
    assert result.answer_check["kept"] == "second" and result.answer_check["select"] == "grounded"
    assert result.answer.endswith("So the answer is Terry Richardson.") and len(prompts) == 2
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert all(e.passage_ids == ["a", "b", "c", "d"] for e in tokens if e.attempt == 1)


def test_the_preset_and_the_eval_flag() -> None:
    kwargs = preset_kwargs("look-again-grounded")
    assert kwargs["answer"].options is True and kwargs["answer"].check.select == "grounded"
    assert PRESETS["look-again-grounded"].context == "accumulate"
    specs = build_methods(EvalConfig(dataset="hotpotqa", methods=["sr-rag", "look-again-grounded"], answer_options=True))
    assert [(s.name, s.answer_options) for s in specs] == [("sr-rag@options", True), ("look-again-grounded", False)]
    specs = build_methods(EvalConfig(dataset="hotpotqa", triggers=["once"], queries=["input"], answer_options=True))
    assert [s.name for s in specs] == ["once+input@options"]


def test_look_again_grounded_does_not_look_again_after_yes_or_no() -> None:
    from active_rag.engine.answer_steps import YES_NO_STANDS

    prompts: list[str] = []

    def script(prompt: str) -> list:
        prompts.append(prompt)
        return words("Both are films. So the answer is yes.", yes=(0.4, 0.1))

    result = ActiveRAG.from_preset("look-again-grounded", ScriptedLM(script=script), Ranked([A, B, C, D]),
                                   top_k=2).run("Are Glow and Sleep both films?")
    assert len(prompts) == 1 and len(result.retrievals) == 1 and result.draft is None
    assert result.answer_check["fired"] is False and result.answer_check["reason"] == YES_NO_STANDS
    assert [d.reason for d in result.decisions if d.trigger == "answer-check"] == [YES_NO_STANDS]


def test_the_options_chain_after_a_triggers_processor_and_keep_its_hooks(tiny_lm) -> None:
    """FLARE-instruct's bracket bias has ``after_search``, which the engine calls after each search: with answer
    options chained behind it, the hook still reaches it."""
    from active_rag.engine import Run as _Run
    from active_rag.engine.generation import Generation
    from active_rag.components.triggers import make_trigger

    rag = ActiveRAG.from_preset("flare-instruct", tiny_lm, Ranked([A, B]), answer_options=True)
    base = make_trigger("search-tag").logits_processor(tiny_lm)
    assert hasattr(base, "after_search")
    choice = _Run(question="Who is older, Annie Morton or Terry Richardson?", trigger=rag.trigger)
    chained = Generation(rag).processor(choice, base)
    assert chained is not base and hasattr(chained, "after_search")
    chained.after_search()  # reaches the bias: it forbids "[" for the next tokens
    assert base.forbid_left > 0
    plain = _Run(question="Who directed Glow?", trigger=rag.trigger)
    assert Generation(rag).processor(plain, base) is base and Generation(rag).processor(plain) is None
