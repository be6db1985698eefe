"""The per-question choice of what to read after the question's passages (``sr-rag-choose``,
:mod:`active_rag.methods.read_choice`): a comparison of things the question names reads their own articles, any other
question follows the links of its passages."""

from __future__ import annotations

import pytest

from active_rag import ActiveRAG, AnswerStage, Passage
from active_rag.errors import InvalidOptionError
from active_rag.retrieval.name_index import NameIndex
from active_rag.methods.read_choice import choose_reading, question_form
from tests.unit_tests.test_answer_check import _reader
from tests.unit_tests.test_linked import printed


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
