"""The answer check (issue 28, ``look-again``): FLARE's low-probability test on the finished answer's span; when
unsure, the question's next passages, a second answer, and the surer of the two kept. Driven by the scripted
word-level model of test_loop, so every prompt the model saw is known."""

from __future__ import annotations

import math

import pytest

from active_rag import ActiveRAG, Passage
from active_rag.answer.check import AnswerCheck, answer_confidence, answer_span, echoes_question, make_answer_check
from active_rag.errors import InvalidOptionError
from active_rag.types import Retrieval, TokenEvent, TokenStep, TriggerDecision
from tests.unit_tests.test_loop import ScriptedLM, Word, words
from tests.recipes import recipe

QUESTION = "Who directed the film that starred Annie Morton?"
A = Passage(id="a", title="Annie Morton", text="Annie Morton starred in Glow.")
B = Passage(id="b", title="Glow (film)", text="Glow is a film.")
C = Passage(id="c", title="Glow director", text="Glow was directed by Terry Richardson.")
D = Passage(id="d", title="Other", text="Another passage.")


class Ranked:
    """A retriever with one ranking per query; records every call."""

    def __init__(self, ranking: list[Passage]) -> None:
        self.ranking = ranking
        self.calls: list[tuple[str, int]] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.calls.append((query, k))
        return self.ranking[:k]


def _steps(text: str, probs: dict[str, float] | None = None) -> list[TokenStep]:
    probs = probs or {}
    return [TokenStep(id=i, text=" " + w, logprob=math.log(probs.get(w.strip(".:\""), 0.9)), entropy=0.1, position=i)
            for i, w in enumerate(text.split())]


# -- the answer span and its confidence ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Glow was directed by Terry. So the answer is Terry Richardson.", "Terry Richardson"),
        ('So the answer is: "Paris".', "Paris"),
        ("So the answer is F. W. Murnau.", "F. W. Murnau"),  # an initial's period does not end the answer
        ("So the answer is yes. It is.", "yes"),
        ("The answer is 1,400\nMore text.", "1,400"),
        ("Terry Richardson directed it.", None),
        ("So the answer is .", None),
    ],
)
def test_answer_span_is_the_words_after_the_last_answer_phrase(text: str, answer: str | None) -> None:
    span = answer_span(text)
    assert (text[span[0]:span[1]] if span else None) == answer


def test_answer_confidence_reads_the_answer_tokens_only() -> None:
    steps = _steps("He was unsure. So the answer is Terry Richardson.", {"Terry": 0.4, "He": 0.01})
    conf = answer_confidence(steps)
    assert conf.answer == "Terry Richardson" and conf.tokens == 2 and conf.token == " Terry"
    assert conf.min_prob == pytest.approx(0.4)  # "He" (p 0.01) is not part of the answer
    assert conf.mean_logprob == pytest.approx((math.log(0.4) + math.log(0.9)) / 2)
    none = answer_confidence(_steps("Terry Richardson directed it."))
    assert none.tokens == 0 and none.mean_logprob == -math.inf and none.to_dict()["mean_logprob"] is None


def test_check_options_are_validated() -> None:
    with pytest.raises(InvalidOptionError, match="theta"):
        AnswerCheck(theta=1.5)
    with pytest.raises(InvalidOptionError, match="mean, min, new-evidence, second"):
        AnswerCheck(select="longest")
    with pytest.raises(InvalidOptionError, match="answer_check"):
        make_answer_check("yes")  # type: ignore[arg-type]
    assert make_answer_check(None) is None and make_answer_check(0.5) == AnswerCheck(theta=0.5)
    check = AnswerCheck(theta=0.5)
    sure = answer_confidence(_steps("So the answer is Terry."))
    unsure = answer_confidence(_steps("So the answer is Terry.", {"Terry": 0.3}))
    assert not check.unsure(sure) and check.unsure(unsure) and check.unsure(answer_confidence(_steps("Terry.")))
    assert not check.keep_second(sure, unsure) and check.keep_second(unsure, sure)
    assert AnswerCheck(select="second").keep_second(sure, unsure)
    # mean and min can disagree: one weak token against many middling ones
    one_weak = answer_confidence(_steps("So the answer is Terry Richardson Smith.", {"Terry": 0.3, "Richardson": 1.0, "Smith": 1.0}))
    middling = answer_confidence(_steps("So the answer is Terry Richardson Smith.", {"Terry": 0.5, "Richardson": 0.5, "Smith": 0.5}))
    assert AnswerCheck(select="mean").keep_second(middling, one_weak) and not AnswerCheck(select="min").keep_second(middling, one_weak)


def test_an_answer_that_only_repeats_the_question_is_not_kept_over_one_that_does_not() -> None:
    assert echoes_question("Annie Morton", QUESTION) and echoes_question("the film", QUESTION)
    assert not echoes_question("Terry Richardson", QUESTION) and not echoes_question("Morton Salt", QUESTION)
    assert not echoes_question("Ann", QUESTION) and not echoes_question("", QUESTION)  # whole words only
    echo = answer_confidence(_steps("So the answer is Annie Morton.", {"Annie": 0.9, "Morton": 0.9}))
    other = answer_confidence(_steps("So the answer is Terry Richardson.", {"Terry": 0.2, "Richardson": 0.2}))
    check = AnswerCheck(avoid_echo=True)
    assert check.keep_second(echo, other, QUESTION) and not check.keep_second(other, echo, QUESTION)
    assert not check.keep_second(echo, other)  # without the question: the confidence rule alone
    assert not AnswerCheck().keep_second(echo, other, QUESTION)  # off by default
    assert check.describe()["avoid_echo"] and "avoid_echo" not in AnswerCheck().describe()
    both = answer_confidence(_steps("So the answer is the film.", {"the": 0.95, "film": 0.95}))
    assert check.keep_second(echo, both, QUESTION)  # both repeat the question: the surer one


# -- the engine ------------------------------------------------------------------------------------------
def _reader(unsure_first: bool = True, second_surer: bool = True) -> tuple[ScriptedLM, list[str]]:
    """With passage C in the prompt the model names the director; without it, it guesses."""
    prompts: list[str] = []

    def script(prompt: str) -> list[Word]:
        prompts.append(prompt)
        if "directed by Terry Richardson" in prompt:
            return words("Glow was directed by Terry Richardson. So the answer is Terry Richardson.",
                         Terry=(0.9 if second_surer else 0.1, 0.1))
        return words("Annie Morton starred in Glow. So the answer is Annie Morton.",
                     Annie=(0.3 if unsure_first else 0.97, 0.1), Morton=(0.6, 0.1))

    return ScriptedLM(script=script), prompts


def test_an_unsure_answer_looks_again_with_the_next_passages_and_keeps_the_surer_answer() -> None:
    lm, prompts = _reader()
    wiki = Ranked([A, B, C, D])
    rag = ActiveRAG(lm, wiki, **recipe("look-again", top_k=2))
    events = list(rag.stream(QUESTION))
    result = events[-1]
    assert result.answer == "Glow was directed by Terry Richardson. So the answer is Terry Richardson."
    assert result.draft == "Annie Morton starred in Glow. So the answer is Annie Morton."
    # the second retrieval asked for the question's next passages, skipping the held ones
    assert [r.query for r in result.retrievals] == [QUESTION, QUESTION]
    assert [p.id for p in result.retrievals[1].passages] == ["c", "d"] and result.retrievals[1].new_ids == ["c", "d"]
    assert result.final_passage_ids == ["a", "b", "c", "d"]  # the first prompt's passages first: a shared prefix
    assert prompts[-1].index("starred in Glow") < prompts[-1].index("directed by Terry")
    check = [d for d in result.decisions if d.trigger == "answer-check"]
    assert len(check) == 1 and check[0].fire and check[0].token == " Annie" and check[0].score == pytest.approx(0.3)
    assert check[0].passage_ids == ["a", "b"] and "p=0.300 < theta=1" in check[0].reason
    record = result.answer_check
    assert record is not None and record["kept"] == "second" and record["fired"]
    assert record["draft"]["answer"] == "Annie Morton" and record["second"]["answer"] == "Terry Richardson"
    assert result.to_dict()["answer_check"] == record and rag.describe()["answer_check"]["theta"] == 1.0
    # the trace: the decision, then its retrieval, then the second answer streamed again from position 0
    kinds = [type(e).__name__ for e in events if isinstance(e, (TriggerDecision, Retrieval))]
    assert kinds == ["Retrieval", "TriggerDecision", "Retrieval"]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    restart = max(i for i, e in enumerate(tokens) if e.position == 0)
    assert restart > 0 and "".join(e.text for e in tokens[restart:]).strip() == result.answer


class ByQuery:
    """A retriever whose ranking depends on whether the query names the bridge ("Glow"); records the queries."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        return ([C, A, B, D] if "Glow" in query else [A, B, D, C])[:k]


def test_the_next_hop_look_retrieves_with_the_question_and_the_draft() -> None:
    """``query="draft"`` (preset ``look-again-next-hop``): the bridge the draft names ("Glow") finds the passage the
    question's own ranking puts last."""
    lm, _ = _reader()
    wiki = ByQuery()
    rag = ActiveRAG(lm, wiki, **recipe("look-again-next-hop", top_k=2))
    result = rag.run(QUESTION)
    assert rag.answer_check is not None and rag.answer_check.query == "draft"
    assert rag.describe()["answer_check"]["query"] == "draft"
    assert [r.query for r in result.retrievals] == [QUESTION, f"{QUESTION} {result.draft}"]
    assert result.retrievals[1].new_ids == ["c", "d"] and result.retrievals[1].formulator == "question+draft"
    question_only = ActiveRAG.from_preset("look-again-grounded", _reader()[0], ByQuery(), top_k=2).run(QUESTION)
    assert question_only.retrievals[1].new_ids == ["d", "c"]
    assert "query" not in ActiveRAG.from_preset("look-again-grounded", lm, wiki).describe()["answer_check"]
    with pytest.raises(InvalidOptionError, match="question, draft"):
        AnswerCheck(query="entity")


def test_the_draft_stays_when_the_model_is_surer_of_it() -> None:
    lm, _ = _reader(second_surer=False)
    # the draft names the question's own film star: with avoid_echo that alone loses to the second answer
    echo = ActiveRAG(lm, Ranked([A, B, C, D]), **recipe("look-again", top_k=2, answer_check=AnswerCheck(avoid_echo=True))).run(QUESTION)
    assert echo.answer_check["kept"] == "second" and echo.answer.endswith("Terry Richardson.")
    lm, _ = _reader(second_surer=False)
    rag = ActiveRAG(lm, Ranked([A, B, C, D]), **recipe("look-again", top_k=2))
    events = list(rag.stream(QUESTION))
    result = events[-1]
    assert result.answer == "Annie Morton starred in Glow. So the answer is Annie Morton."
    assert result.final_passage_ids == ["a", "b"]  # the evidence of the answer kept
    assert result.answer_check["kept"] == "draft" and result.draft == result.answer
    assert result.answer_check["second_text"].strip().endswith("So the answer is Terry Richardson.")  # not lost
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    restart = max(i for i, e in enumerate(tokens) if e.position == 0)
    assert "".join(e.text for e in tokens[restart:]).strip() == result.answer  # the kept answer streamed last
    assert [t.text for t in result.tokens] == [e.text for e in tokens[restart:]]


def test_a_sure_answer_is_not_checked_again() -> None:
    lm, prompts = _reader(unsure_first=False)
    wiki = Ranked([A, B, C, D])
    result = ActiveRAG(lm, wiki, **recipe("look-again", top_k=2, answer_check=AnswerCheck(theta=0.5))).run(QUESTION)
    assert len(result.retrievals) == 1 and result.draft is None and len(prompts) == 1
    assert result.answer_check == {"name": "answer-check", "theta": 0.5, "select": "min", "fired": False,
                                   "draft": result.answer_check["draft"], "second": None, "kept": "draft"}
    assert [d.fire for d in result.decisions if d.trigger == "answer-check"] == [False]


def test_no_second_answer_when_the_retrieval_finds_nothing_new() -> None:
    lm, prompts = _reader()
    result = ActiveRAG(lm, Ranked([A, B]), **recipe("look-again", top_k=2)).run(QUESTION)
    assert len(result.retrievals) == 2 and result.retrievals[1].new_ids == [] and len(prompts) == 1
    assert result.draft is None and result.answer_check["reason"] == "the retrieval added no passage"


def test_no_check_without_retrieval_and_no_two_second_answers() -> None:
    lm, prompts = _reader()
    result = ActiveRAG.from_preset("wo-rag", lm, answer_check=True).run(QUESTION)
    assert result.answer_check is None and len(prompts) == 1
    with pytest.raises(InvalidOptionError, match="reanswer and an answer check"):
        ActiveRAG(lm, Ranked([A]), **recipe("look-again", reanswer=True))
