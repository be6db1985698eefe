"""The second look that follows the passages' links (issue 28, ``look-again-linked``, :mod:`active_rag.linked`):
the names the draft's passages mention, each asked alone, own articles only, ranked by the question's words."""

from __future__ import annotations

import pytest

from active_rag import ActiveRAG, Passage
from active_rag.answer_check import AnswerCheck
from active_rag.errors import RetrieverError
from active_rag.linked import linked_articles, linked_names, linked_sources
from tests.unit_tests.test_answer_check import _reader

QUESTION = "Who directed the film that starred Annie Morton?"
A = Passage(id="a", title="Annie Morton", text="Annie Morton starred in Glow and met Paul Smith in Paris.")
B = Passage(id="b", title="Annie Morton (model)", text="Annie Morton is an American model.")
C = Passage(id="c", title="Glow (film)", text="Glow was directed by Terry Richardson.")
D = Passage(id="d", title="Other", text="Another passage.")
E = Passage(id="e", title="Paul Smith", text="Paul Smith is a designer.")
F = Passage(id="f", title="Paris", text="Paris is a city where a film starred many.")
G = Passage(id="g", title="Glow Worm Cave Tours", text="Glow sticks are not a film.")
H = Passage(id="h", title="American Scary", text="American Scary is a film that starred hosts.")


class Wiki:
    """Asked with the question: a ranking that puts the bridge article last; asked with a name: the passages whose
    title or text holds it, a look-alike first. Records every query."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        if query == QUESTION:
            return [A, B, D, F, E, C][:k]
        return [p for p in (G, H, A, B, C, D, E, F) if query in p.title or query in p.text][:k]


def test_linked_names_are_the_passages_names_the_question_does_not_name() -> None:
    assert linked_names([A, B], QUESTION) == ["Glow", "Paul Smith", "Paris", "American"]
    assert linked_names([A, A], "Who met Paul Smith in Paris?") == ["Annie Morton", "Glow"]
    assert linked_names([], QUESTION) == []
    # a sentence's end ends a name: not "Howard Dimsdale. It"
    told = Passage(id="t", title="Glow (film)", text="It was written by Howard Dimsdale. It starred Paul Smith.")
    assert linked_names([told], QUESTION) == ["Howard Dimsdale", "Paul Smith"]


def test_linked_articles_are_own_articles_ranked_by_the_question_then_its_next_passages() -> None:
    wiki = Wiki()
    found = linked_articles(wiki, [A, B], QUESTION, 3, held={"a", "b"})
    # own articles only ("Glow Worm Cave Tours" is not Glow's, "American Scary" not American's); "Paris" shares "film" and "starred" with the question,
    # "Glow (film)" shares "film", "Paul Smith" nothing; the held passages never come back
    assert [p.id for p in found] == ["f", "c", "e"]
    assert wiki.queries == ["Glow", "Paul Smith", "Paris", "American", QUESTION]
    # fewer articles than k: the question's next-ranked passages fill up, without repeating one
    assert [p.id for p in linked_articles(Wiki(), [B], QUESTION, 3, held={"a", "b"})] == ["d", "f", "e"]
    # where each came from: a name's own article, or the question's next passage (None)
    assert [(p.id, name) for p, name in linked_sources(Wiki(), [A, B], QUESTION, 4, held={"a", "b"})] == [
        ("f", "Paris"), ("c", "Glow"), ("e", "Paul Smith"), ("d", None)]
    assert linked_articles(Wiki(), [A], QUESTION, 0) == []


def test_a_failing_retriever_names_the_name_it_was_asked() -> None:
    class Broken:
        def retrieve(self, query: str, k: int) -> list[Passage]:
            raise OSError("index gone")

    with pytest.raises(RetrieverError, match="'Glow'.*index gone"):
        linked_articles(Broken(), [A], QUESTION, 2)


def test_the_linked_look_reads_the_bridge_article_the_question_ranks_last() -> None:
    lm, prompts = _reader()
    wiki = Wiki()
    rag = ActiveRAG.from_preset("look-again-linked", lm, wiki, top_k=2)
    result = rag.run(QUESTION)
    assert rag.answer_check is not None and rag.answer_check.query == "linked"
    assert rag.describe()["answer_check"]["query"] == "linked"
    look = result.retrievals[1]
    assert look.formulator == "linked"
    # which passage is which name's own article: in the trace, its JSON and the CLI's printout
    assert look.details == {"names": ["Glow", "Paul Smith", "Paris", "American"], "articles": {"f": "Paris", "c": "Glow"}}
    assert look.to_dict()["linked_articles"] == {"f": "Paris", "c": "Glow"}
    assert "linked_articles" not in result.retrievals[0].to_dict()
    assert look.query == " | ".join(["Glow", "Paul Smith", "Paris", "American", QUESTION])
    assert look.new_ids == ["f", "c"] and result.final_passage_ids == ["a", "b", "f", "c"]
    assert "directed by Terry Richardson" in prompts[-1]
    assert result.answer.endswith("So the answer is Terry Richardson.") and result.answer_check["kept"] == "second"
    # the question's next passages (the default look) never reach the bridge article with two passages
    plain = ActiveRAG.from_preset("look-again-grounded", _reader()[0], Wiki(), top_k=2).run(QUESTION)
    assert plain.retrievals[1].new_ids == ["d", "f"] and "c" not in plain.final_passage_ids
    assert AnswerCheck(query="linked").look_query(QUESTION, "draft text") == QUESTION


def test_ask_prints_which_name_each_linked_passage_is_the_article_of() -> None:
    import io

    from active_rag.cli import _print_retrieval

    lm, _ = _reader()
    look = ActiveRAG.from_preset("look-again-linked", lm, Wiki(), top_k=3).run(QUESTION).retrievals[1]
    out = io.StringIO()
    _print_retrieval(look, out)
    lines = out.getvalue().splitlines()
    assert "      - Paris  [f]  <- the article of 'Paris'" in lines
    assert "      - Glow (film)  [c]  <- the article of 'Glow'" in lines
    assert "      - Paul Smith  [e]  <- the article of 'Paul Smith'" in lines
    first = io.StringIO()  # a retrieval with the question: no origin to print
    _print_retrieval(ActiveRAG.from_preset("look-again-linked", lm, Wiki(), top_k=3).run(QUESTION).retrievals[0], first)
    assert "<-" not in first.getvalue()


def test_sr_rag_linked_reads_the_linked_articles_before_the_first_token_and_answers_once() -> None:
    from active_rag.types import Retrieval, TokenEvent

    lm, prompts = _reader()
    rag = ActiveRAG.from_preset("sr-rag-linked", lm, Wiki(), top_k=2)
    events = list(rag.stream(QUESTION))
    result = events[-1]
    first, linked = result.retrievals
    assert (first.formulator, first.query, first.passage_ids) == ("input", QUESTION, ["a", "b"])
    assert linked.formulator == "linked" and linked.position == 0 and linked.new_ids == ["f", "c"]
    assert linked.details["articles"] == {"f": "Paris", "c": "Glow"}
    # both retrievals come before the first token, and the one answer is written with all four passages
    kinds = [type(e).__name__ for e in events if isinstance(e, (Retrieval, TokenEvent))]
    assert kinds[:2] == ["Retrieval", "Retrieval"] and set(kinds[2:]) == {"TokenEvent"}
    assert len(prompts) == 1 and "directed by Terry Richardson" in prompts[0]
    assert result.answer == "Glow was directed by Terry Richardson. So the answer is Terry Richardson."
    assert result.final_passage_ids == ["a", "b", "f", "c"] and result.answer_check is None and result.draft is None
    assert rag.describe()["follow_links"] is True and "follow_links" not in ActiveRAG.from_preset(
        "look-again-linked", lm, Wiki()).describe()
    # without the links the same reader, with the question's passages only, guesses
    plain = ActiveRAG(lm, Wiki(), trigger="once", query="input", context="accumulate", top_k=2).run(QUESTION)
    assert plain.answer.endswith("So the answer is Annie Morton.") and len(plain.retrievals) == 1


def test_follow_links_needs_a_first_retrieval_and_a_policy_that_keeps_it() -> None:
    from active_rag.errors import InvalidOptionError

    lm, _ = _reader()
    with pytest.raises(InvalidOptionError, match="context 'replace' would replace them.*accumulate"):
        ActiveRAG(lm, Wiki(), trigger="once", query="input", follow_links=True)
    with pytest.raises(InvalidOptionError, match="trigger='once' or initial_retrieval=True"):
        ActiveRAG(lm, Wiki(), trigger="fixed-sentence", query="last-sentence", context="accumulate", follow_links=True)
    with pytest.raises(InvalidOptionError, match="trigger='once' or initial_retrieval=True"):  # never retrieves at all
        ActiveRAG(lm, Wiki(), trigger="never", query="input", context="accumulate", initial_retrieval=True,
                  follow_links=True)
    # any trigger that retrieves with the question first may follow the links, e.g. FS-RAG
    rag = ActiveRAG(lm, Wiki(), trigger="fixed-sentence", query="last-sentence", context="accumulate",
                    initial_retrieval=True, follow_links=True, top_k=2)
    assert [r.formulator for r in rag.run(QUESTION).retrievals][:2] == ["input", "linked"]


def test_a_one_word_name_needs_an_article_titled_with_it_alone() -> None:
    from active_rag.entities import is_article_of, is_own_passage

    assert is_own_passage(H, "American") and not is_article_of(H, "American")
    assert is_article_of(C, "Glow") and is_article_of(E, "Paul Smith")
    assert is_article_of(Passage(id="x", title="Paul Smith (designer)", text=""), "Paul Smith")
    assert is_article_of(Passage(id="y", title="Paul Smith Jr", text=""), "Paul Smith")  # two words: one may differ
    assert not is_article_of(Passage(id="z", title="", text="Glow is a film."), "Glow")


# -- the evidence-recall tool ----------------------------------------------------------------------------
def test_the_recall_table_counts_prompts_that_hold_every_gold_passage() -> None:
    from active_rag.evaluation.datasets import Example
    from active_rag.evaluation.linked_recall import recall_table

    examples = [Example(id="q1", question=QUESTION, answers=["Terry Richardson"], kind="qa", gold_passage_ids=["a", "c"]),
                Example(id="q2", question=QUESTION, answers=["x"], kind="qa", gold_passage_ids=["a", "d"]),
                Example(id="q3", question=QUESTION, answers=["x"], kind="qa")]  # no gold ids: left out
    table = recall_table(Wiki(), examples, top_k=2, more=2)
    assert table["first"]["all_gold"] == 0.0
    # the question's next two are d and f: q2 only; the linked two are f and c: q1 only; c is the one the question's
    # ranking would not have added (f it would), and it is gold for q1, not for q2
    assert table["question"] == {"all_gold": 50.0, "new_evidence": 50.0, "linked": 0.0, "linked_without_gold": 0.0}
    assert table["linked"] == {"all_gold": 50.0, "new_evidence": 50.0, "linked": 1.0, "linked_without_gold": 0.5}
    with pytest.raises(ValueError, match="gold passage ids"):
        recall_table(Wiki(), examples[2:])


def test_the_recall_tool_refuses_an_empty_second_retrieval(capsys: pytest.CaptureFixture[str]) -> None:
    from active_rag.evaluation.linked_recall import main

    assert main(["--dataset", "hotpotqa", "--more", "0"]) == 2
    assert "--more must be at least 1" in capsys.readouterr().err


def test_the_recall_tool_names_a_missing_data_folder(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from active_rag.evaluation.linked_recall import main

    assert main(["--dataset", "hotpotqa", "--data-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: The hotpotqa question file") and "nowhere" in err.splitlines()[0]
