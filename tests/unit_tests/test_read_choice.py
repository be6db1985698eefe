"""The per-question choice of what to read after the question's passages (``sr-rag-choose``,
:mod:`active_rag.answer.read_choice`): a comparison of things the question names reads their own articles, any other
question follows the links of its passages."""

from __future__ import annotations

import math

import pytest

from active_rag import ActiveRAG, AnswerCheck, AnswerStage, Passage
from active_rag.answer.check import answer_confidence
from active_rag.types import TokenStep
from active_rag.errors import InvalidOptionError
from active_rag.retrieval.name_index import NameIndex
from active_rag.components.presets import PRESETS
from active_rag.answer.read_choice import choose_reading, question_form
from tests.unit_tests.test_answer_check import _reader
from tests.unit_tests.test_linked import printed
from tests.unit_tests.test_loop import ScriptedLM, Word, words


@pytest.mark.parametrize("question, form, way", [
    ("Who is older, Annie Morton or Terry Richardson?", "choice", "compare"),
    ("Which was founded first, Tesla or Ford?", "choice", "compare"),
    ("Are the Laleli Mosque and Esma Sultan Mansion located in the same neighborhood?", "yes-no", "compare"),
    # a comparison through a relation of the named things: their directors are named elsewhere
    ("Which film has the director who died later, The More The Merrier or Sleep, My Love?", "choice", "links"),
    ("Are director of film Sleepers and director of film The Juniper Tree from the same country?", "yes-no", "links"),
    ("Is Paris the capital of France?", "yes-no", "compare"),
    ("Is the capital of France big?", "yes-no", "links"),  # names one thing: nothing to compare
    ("What government position was held by the woman who portrayed Corliss Archer?", "open", "links"),
    ("How much does AWS or Azure charge per GB?", "open", "links"),  # not a choice: it asks how much
])
def test_the_rule_reads_the_question_form(question: str, form: str, way: str) -> None:
    choice = choose_reading(question)
    assert question_form(question) == form and choice.way == way and choice.reason


Q = "Who is older, Annie Morton or Terry Richardson?"
ANNIE = Passage(id="a", title="Annie Morton", text="Annie Morton (born 1970) is a model who worked with Paul Smith.")
OTHER = Passage(id="o", title="Glow", text="Glow is a film about a model.")
PAUL = Passage(id="p", title="Paul Smith", text="Paul Smith is a designer.")
TERRY = Passage(id="t", title="Terry Richardson", text="Terry Richardson (born 1965) is a photographer.")
NEXT = Passage(id="n", title="Older", text="Who is older is a question people ask.")
ALL = [ANNIE, OTHER, PAUL, TERRY, NEXT]


class Corpus:
    """Asked with the question: Annie's article, then a passage about neither, then the question's next ones
    (Terry's article last); every passage in its name index. Records every query."""

    name_index = NameIndex.from_passages(ALL)

    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        return [ANNIE, OTHER, NEXT, PAUL, TERRY][:k]


def test_a_comparison_reads_the_named_things_articles_not_the_passages_links() -> None:
    lm, _ = _reader()
    corpus = Corpus()
    result = ActiveRAG.from_preset("sr-rag-choose", lm, corpus, top_k=2).run(Q)
    first, added = result.retrievals
    assert first.passage_ids == ["a", "o"] and added.position == 0
    assert added.details["choice"] == "compare" and "comparing what it names" in added.details["choice_reason"]
    # Terry's article (a name of the question), then the question's next passage; not Paul Smith (Annie's link)
    assert added.new_ids == ["t", "n"] and added.details["articles"] == {"t": "Terry Richardson"}
    linked = ActiveRAG.from_preset("sr-rag-linked", lm, Corpus(), top_k=2).run(Q).retrievals[1]
    assert linked.new_ids == ["t", "p"] and "choice" not in linked.details  # the links of Annie's article too
    assert corpus.queries == [Q, Q]  # the first retrieval and the question's next passages: no call per name


def test_an_open_question_follows_the_links_as_sr_rag_linked_does() -> None:
    lm, _ = _reader()
    question = "What does the designer who worked with Annie Morton make?"
    chosen = ActiveRAG.from_preset("sr-rag-choose", lm, Corpus(), top_k=2).run(question).retrievals[1]
    linked = ActiveRAG.from_preset("sr-rag-linked", lm, Corpus(), top_k=2).run(question).retrievals[1]
    assert chosen.details["choice"] == "links" and chosen.new_ids == linked.new_ids
    assert "p" in chosen.new_ids


def test_follow_links_takes_true_false_or_choose() -> None:
    lm, _ = _reader()
    with pytest.raises(InvalidOptionError, match="'choose'"):
        ActiveRAG(lm, Corpus(), trigger="once", context="accumulate", answer=AnswerStage(links="always"))
    rag = ActiveRAG(lm, Corpus(), trigger="once", context="accumulate", answer=AnswerStage(links="choose"))
    assert rag.describe()["follow_links"] == "choose"


def test_ask_prints_the_choice_and_the_names_followed() -> None:
    lm, _ = _reader()
    lines = printed(ActiveRAG.from_preset("sr-rag-choose", lm, Corpus(), top_k=2).run(Q).retrievals[1])
    assert any(line.startswith("      chose compare: a choice question comparing what it names") for line in lines)
    assert "      names followed: Terry Richardson" in lines


# -- look-again-choose: read nothing more when the draft is sure ------------------------------------------
def _older(sure: float) -> tuple[ScriptedLM, list[str]]:
    """Without Terry's article the model names Annie with probability ``sure``; with it, Terry, surely."""
    prompts: list[str] = []

    def script(prompt: str) -> list[Word]:
        prompts.append(prompt)
        if "Terry Richardson (born 1965)" in prompt:
            return words("Terry was born in 1965. So the answer is Terry Richardson.", Terry=(0.9, 0.1))
        return words("Annie was born in 1970. So the answer is Annie Morton.", Annie=(sure, 0.1), Morton=(0.99, 0.1))

    return ScriptedLM(script=script), prompts


def test_look_again_choose_reads_nothing_more_when_the_draft_is_sure() -> None:
    lm, prompts = _older(sure=0.99)
    corpus = Corpus()
    result = ActiveRAG.from_preset("look-again-choose", lm, corpus, top_k=2).run(Q)
    assert [r.query for r in result.retrievals] == [Q] and corpus.queries == [Q]  # one retriever call, no look
    assert result.answer.endswith("So the answer is Annie Morton.") and len(prompts) == 1
    check = result.answer_check
    assert check is not None and not check["fired"] and check["kept"] == "draft" and check["second"] is None
    assert result.final_passage_ids == ["a", "o"]


def test_look_again_choose_reads_what_sr_rag_choose_reads_when_unsure_and_keeps_the_second_answer() -> None:
    theta = PRESETS["look-again-choose"].answer.check.theta  # type: ignore[union-attr]
    lm, prompts = _older(sure=theta - 0.05)
    result = ActiveRAG.from_preset("look-again-choose", lm, Corpus(), top_k=2).run(Q)
    decision = next(d for d in result.decisions if d.trigger == "answer-check")
    assert decision.fire and f"< theta={theta:g}" in decision.reason
    first, look = result.retrievals
    assert look.details["choice"] == "compare" and look.new_ids == ["t", "n"]  # the question's names' articles
    assert result.answer_check is not None and result.answer_check["kept"] == "second"
    assert result.answer.endswith("So the answer is Terry Richardson.") and result.draft is not None
    # the second prompt is sr-rag-choose's: the same passages in the same order, so the same answer
    lm2, prompts2 = _older(sure=theta - 0.05)
    choose = ActiveRAG.from_preset("sr-rag-choose", lm2, Corpus(), top_k=2).run(Q)
    assert result.final_passage_ids == choose.final_passage_ids and prompts[-1] == prompts2[-1]
    assert result.answer == choose.answer


def test_an_open_question_looks_at_the_links_of_the_drafts_passages() -> None:
    lm, _ = _older(sure=0.1)
    question = "What does the designer who worked with Annie Morton make?"
    look = ActiveRAG.from_preset("look-again-choose", lm, Corpus(), top_k=2).run(question).retrievals[1]
    chosen = ActiveRAG.from_preset("sr-rag-choose", _older(sure=0.1)[0], Corpus(), top_k=2).run(question).retrievals[1]
    assert look.details["choice"] == "links" and look.new_ids == chosen.new_ids and "p" in look.new_ids


def test_a_draft_not_found_in_its_passages_is_unsure_however_sure_the_model_is() -> None:
    prompts: list[str] = []

    def script(prompt: str) -> list[Word]:
        prompts.append(prompt)
        if "Terry Richardson (born 1965)" in prompt:
            return words("Terry was born in 1965. So the answer is Terry Richardson.")
        return words("So the answer is Mary Poppins.", Mary=(0.99, 0.1), Poppins=(0.99, 0.1))

    check = AnswerCheck(theta=0.5, select="second", query="choose", ground_draft=True)
    rag = ActiveRAG.from_preset("look-again-choose", ScriptedLM(script=script), Corpus(), top_k=2,
                                answer=AnswerStage(check=check, options=True))
    result = rag.run(Q)
    decision = next(d for d in result.decisions if d.trigger == "answer-check")
    assert decision.fire and decision.reason == "answer 'Mary Poppins' is not found in its passages"
    assert result.answer.endswith("Terry Richardson.") and len(prompts) == 2
    assert rag.describe()["answer_check"]["ground_draft"] is True
    # without ground_draft the sure draft stands, and nothing more is read
    plain = ActiveRAG.from_preset("look-again-choose", ScriptedLM(script=script), Corpus(), top_k=2,
                                  answer=AnswerStage(check=AnswerCheck(theta=0.5, select="second", query="choose"),
                                                     options=True)).run(Q)
    assert plain.answer.endswith("Mary Poppins.") and len(plain.retrievals) == 1
    assert "ground_draft" not in AnswerCheck().describe()


def test_ground_draft_judges_yes_and_no_by_theta() -> None:
    check = AnswerCheck(theta=0.5, ground_draft=True)
    sure_yes = answer_confidence(words_steps("So the answer is yes.", 0.9))
    assert not check.unsure(sure_yes, "Nothing here says yes or no.")
    assert check.unsure(answer_confidence(words_steps("So the answer is yes.", 0.4)), "")
    sure_name = answer_confidence(words_steps("So the answer is Paris.", 0.9))
    assert check.unsure(sure_name, "Rome is a city.") and not check.unsure(sure_name, "Paris is a city.")
    assert not check.unsure(sure_name)  # no passages given: theta alone


def words_steps(text: str, prob: float) -> list[TokenStep]:
    """``text`` as generated tokens, one a word, each with probability ``prob``."""
    return [TokenStep(id=n, text=(" " if n else "") + w, logprob=math.log(prob), entropy=0.1, position=n)
            for n, w in enumerate(text.split())]


class BothNamed(Corpus):
    """Asked with the question: both named things' articles first, then the rest."""

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        return [ANNIE, TERRY, OTHER, NEXT, PAUL][:k]


def test_a_comparison_whose_articles_are_held_reads_nothing_more_with_held_comparison_stands() -> None:
    def script(prompt: str) -> list[Word]:
        return words("So the answer is Annie Morton.", Annie=(0.5, 0.1))

    def rag(stands: bool, corpus: Corpus) -> ActiveRAG:
        check = AnswerCheck(theta=0.95, select="second", query="choose", ground_draft=True,
                            held_comparison_stands=stands)
        return ActiveRAG.from_preset("look-again-choose", ScriptedLM(script=script), corpus, top_k=2,
                                     answer=AnswerStage(check=check, options=True))

    corpus = BothNamed()
    result = rag(True, corpus).run(Q)
    decision = next(d for d in result.decisions if d.trigger == "answer-check")
    assert not decision.fire and "already hold" in decision.reason and corpus.queries == [Q]
    assert result.answer_check is not None and result.answer_check["reason"] == decision.reason
    assert len(rag(False, BothNamed()).run(Q).retrievals) == 2  # without it the unsure draft looks again
    # a named thing's article not held yet: the look reads it
    assert len(rag(True, Corpus()).run(Q).retrievals) == 2
    # an open question is never a comparison
    assert len(rag(True, BothNamed()).run("What does the designer who worked with Annie Morton make?").retrievals) == 2
    with pytest.raises(InvalidOptionError, match="query='choose'"):
        AnswerCheck(held_comparison_stands=True)


def test_focus_reads_a_comparison_look_in_full_and_a_links_look_short() -> None:
    """``focus``: a look that compares what the question names keeps every passage (``accumulate``'s prompt), any
    other look the question's best two and its own best; ``compare=0`` focuses both."""
    lm, _ = _older(sure=0.1)
    full = ActiveRAG.from_preset("look-again-choose", lm, Corpus(), top_k=2, context="focus").run(Q)
    accumulated = ActiveRAG.from_preset("look-again-choose", _older(sure=0.1)[0], Corpus(), top_k=2).run(Q)
    look = full.retrievals[1]
    assert look.details["choice"] == "compare" and look.held_ids == ["a", "o", "t", "n"] and look.evicted_ids == []
    assert full.final_passage_ids == accumulated.final_passage_ids
    short = ActiveRAG.from_preset("look-again-choose", _older(sure=0.1)[0], Corpus(), top_k=2,
                                  context="focus:compare=0").run(Q).retrievals[1]
    assert short.held_ids == ["a", "o", "t"] and [p.id for p in short.dropped] == ["n"]
    assert "context policy focus: not kept" in short.dropped_reason
    question = "What does the designer who worked with Annie Morton make?"
    links = ActiveRAG.from_preset("look-again-choose", _older(sure=0.1)[0], Corpus(), top_k=2,
                                  context="focus").run(question).retrievals[1]
    assert links.details["choice"] == "links" and len(links.held_ids) == 2 + 1
