"""The look that follows the passages' links (``look-again-linked``, ``sr-rag-linked``, :mod:`active_rag.answer.links`):
the names the passages mention that are worth following, their own articles looked up in the retriever's name
index (no retriever call per name), ranked by the question's words, then the question's next passages."""

from __future__ import annotations

import pytest

from active_rag import ActiveRAG, AnswerStage, Passage, RunSettings
from active_rag.answer.check import AnswerCheck
from active_rag.errors import RetrieverError
from active_rag.answer.links import (
    MAX_NAMES,
    follow_links,
    linked_articles,
    linked_names,
    linked_sources,
    mentioned_names,
    question_names,
)
from active_rag.retrieval.name_index import NameIndex
from tests.unit_tests.test_answer_check import _reader
from tests.recipes import recipe

QUESTION = "Who directed the film that starred Annie Morton?"
A = Passage(id="a", title="Annie Morton", text="Annie Morton starred in Glow and met Paul Smith in Paris.")
B = Passage(id="b", title="Annie Morton (model)", text="Annie Morton is an American model.")
C = Passage(id="c", title="Glow (film)", text="Glow was directed by Terry Richardson.")
D = Passage(id="d", title="Other", text="Another passage.")
E = Passage(id="e", title="Paul Smith", text="Paul Smith is a designer.")
F = Passage(id="f", title="Paris", text="Paris is a city where a film starred many.")
G = Passage(id="g", title="Glow Worm Cave Tours", text="Glow sticks are not a film.")
H = Passage(id="h", title="American Scary", text="American Scary is a film that starred hosts.")
ALL = [A, B, C, D, E, F, G, H]


class Wiki:
    """Asked with the question: a ranking that puts the bridge article last; asked with a name: the passages whose
    title or text holds it, a look-alike first. Records every query. Its name index covers every passage."""

    name_index: NameIndex | None = NameIndex.from_passages(ALL)

    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        if query == QUESTION:
            return [A, B, D, F, E, C][:k]
        return [p for p in (G, H, A, B, C, D, E, F) if query in p.title or query in p.text][:k]


class PlainWiki(Wiki):
    """The same retriever without a name index: it can only be asked, once per name."""

    name_index = None


def test_mentioned_names_are_the_passages_names_the_question_does_not_name() -> None:
    assert mentioned_names([A, B], QUESTION) == ["Glow", "Paul Smith", "Paris", "American"]
    assert mentioned_names([A, A], "Who met Paul Smith in Paris?") == ["Annie Morton", "Glow"]
    assert mentioned_names([], QUESTION) == []
    # a sentence's end ends a name: not "Howard Dimsdale. It"
    told = Passage(id="t", title="Glow (film)", text="It was written by Howard Dimsdale. It starred Paul Smith.")
    assert mentioned_names([told], QUESTION) == ["Howard Dimsdale", "Paul Smith"]


def test_names_leave_out_the_words_that_open_a_sentence() -> None:
    text = ("Despite the delay, Orion shipped in May. Overall, sales grew. Furthermore Vega was late. "
            "Despite Smith's doubts it sold. Sales fell in June.")
    names = mentioned_names([Passage(id="p", title="", text=text)], "When did the product ship?")
    # "Despite", "Overall", "Furthermore" open sentences; "Despite Smith" names Smith; "Sales" is written in lower
    # case elsewhere in the passages, so it opens a sentence too; months are dates, not names
    assert names == ["Orion", "Vega", "Smith"]
    # adjectives and numbers open sentences as names
    text = "New York hosted it. First Lady Eleanor Roosevelt came. One Direction sang. However, nobody left."
    assert mentioned_names([Passage(id="n", title="", text=text)], "Who came?") == [
        "New York", "First Lady Eleanor Roosevelt", "One Direction"]


def test_linked_articles_are_own_articles_ranked_by_the_question_then_its_next_passages() -> None:
    wiki = Wiki()
    found = linked_articles(wiki, [A, B], QUESTION, 3, held={"a", "b"})
    # own articles only ("Glow Worm Cave Tours" is not Glow's, "American Scary" not American's); "Paris" shares "film"
    # and "starred" with the question, "Glow (film)" "directed", "Paul Smith" nothing; held passages never come back
    assert [p.id for p in found] == ["f", "c", "e"]
    assert wiki.queries == []  # every article came from the name index: the retriever was not asked
    # fewer articles than k: the question's next-ranked passages fill up (one call), without repeating one
    fill = Wiki()
    assert [p.id for p in linked_articles(fill, [B], QUESTION, 3, held={"a", "b"})] == ["d", "f", "e"]
    assert fill.queries == [QUESTION]
    # where each came from: a name's own article, or the question's next passage (None)
    assert [(p.id, name) for p, name in linked_sources(Wiki(), [A, B], QUESTION, 4, held={"a", "b"})] == [
        ("f", "Paris"), ("c", "Glow"), ("e", "Paul Smith"), ("d", None)]
    assert linked_articles(Wiki(), [A], QUESTION, 0) == []
    links = follow_links(Wiki(), [A, B], QUESTION, 3, held={"a", "b"})
    assert links.names == ["Paris", "Glow", "Paul Smith"]  # followed, best first: "American" has no article
    assert links.articles == {"f": "Paris", "c": "Glow", "e": "Paul Smith"} and links.retriever_calls == 0


def test_linked_retrieval_makes_no_retriever_call_per_name() -> None:
    from active_rag.retrieval.bm25 import BM25Index

    class Counting:
        def __init__(self, index: BM25Index) -> None:
            self.index, self.calls = index, 0

        def retrieve(self, query: str, k: int) -> list[Passage]:
            self.calls += 1
            return self.index.retrieve(query, k)

    names = ["Ada Byron", "Ben Carter", "Cleo Dunn", "Dora Ellis", "Emil Frost", "Fay Grant", "Gus Hale", "Hana Ito",
             "Ivo Jones", "Jan Kerr"]
    people = [Passage(id=f"p{i}", title=name, text=f"{name} is a director.") for i, name in enumerate(names)]
    hub = Passage(id="hub", title="Hub", text=" ".join(f"It met {name}." for name in names))
    retriever = Counting(BM25Index.from_passages([hub, *people]))
    links = follow_links(retriever, [hub], "Which director did the hub meet?", 3, held={"hub"})
    assert retriever.calls == 0 and links.retriever_calls == 0 and len(links.passages) == 3
    # ten names, each with an article: at most MAX_NAMES are followed, in mention order when they tie
    assert links.names == names[:MAX_NAMES]
    # the same names asked one by one of a retriever without a name index: one call each, capped, and a warning
    plain = PlainWiki()
    with pytest.warns(UserWarning, match="has no name index"):
        follow_links(plain, [A, B], QUESTION, 3, held={"a", "b"})
    assert plain.queries == ["Glow", "Paul Smith", "Paris", "American"]


def test_names_leave_out_the_titles_the_prompt_holds_and_the_questions_names_it_holds() -> None:
    # the passage's own subject (Glow) is not followed; the question's Annie Morton is, as her article is not held
    own = Passage(id="o", title="Glow (film)", text="Glow was directed by Terry Richardson. Glow met Paul Smith.")
    links = follow_links(Wiki(), [own], QUESTION, 3, held={"o"})
    assert links.names == ["Annie Morton", "Paul Smith"] and links.articles == {"a": "Annie Morton", "e": "Paul Smith"}
    # with Annie Morton's articles in the prompt, the question's names are not followed, nor a held article's name
    held = follow_links(Wiki(), [A], QUESTION, 3, held={"a", "b", "c"})
    assert held.names == ["Paris", "Paul Smith"] and "c" not in held.articles
    assert linked_names([A, B], QUESTION) == ["Glow", "Paul Smith", "Paris", "American"]  # no retriever: no ranking
    assert linked_names([A, B], QUESTION, Wiki(), held={"a", "b"}) == ["Paris", "Glow", "Paul Smith"]


def test_the_questions_own_names_bring_the_article_the_first_retrieval_missed() -> None:
    assert question_names("Who is older, Annie Morton or Terry Richardson?") == ["Annie Morton", "Terry Richardson"]
    terry = Passage(id="t", title="Terry Richardson", text="Terry Richardson (born 1965) is a photographer.")
    wiki = type("WikiT", (Wiki,), {"name_index": NameIndex.from_passages([*ALL, terry])})()
    links = follow_links(wiki, [A], "Who is older, Annie Morton or Terry Richardson?", 1, held={"a"})
    assert links.articles == {"t": "Terry Richardson"} and wiki.queries == []  # Glow's article ties: asked first
    without = follow_links(wiki, [A], "Who is older, Annie Morton or Terry Richardson?", 1, held={"a"},
                           with_question_names=False)
    assert without.articles == {"c": "Glow"}  # the passage's names only


def test_a_failing_retriever_names_the_query_it_was_asked() -> None:
    class Broken(PlainWiki):
        def retrieve(self, query: str, k: int) -> list[Passage]:
            raise OSError("index gone")

    with pytest.warns(UserWarning), pytest.raises(RetrieverError, match="'Glow'.*index gone"):
        linked_articles(Broken(), [A], QUESTION, 2)
    with pytest.raises(RetrieverError, match="Who directed.*index gone"):  # with an index: only the question is asked
        linked_articles(type("BrokenIndexed", (Broken,), {"name_index": Wiki.name_index})(), [D], QUESTION, 2)


def test_the_linked_look_reads_the_bridge_article_the_question_ranks_last() -> None:
    lm, prompts = _reader()
    wiki = Wiki()
    rag = ActiveRAG(lm, wiki, **recipe("look-again-linked", top_k=2))
    result = rag.run(QUESTION)
    assert rag.answer_check is not None and rag.answer_check.query == "linked"
    assert rag.describe()["answer_check"]["query"] == "linked"
    look = result.retrievals[1]
    assert look.formulator == "linked"
    # the names followed, best first, as a list, and which passage is which name's own article: in the trace, its
    # JSON and the CLI's printout; the query is the question, and the look asked the retriever nothing
    assert look.details == {"names": ["Paris", "Glow", "Paul Smith"], "articles": {"f": "Paris", "c": "Glow"},
                            "linked_from": {"f": "a", "c": "a"}}  # the passage that names each article
    assert look.to_dict()["linked_articles"] == {"f": "Paris", "c": "Glow"}
    assert "linked_articles" not in result.retrievals[0].to_dict()
    assert look.query == QUESTION and wiki.queries == [QUESTION]
    assert look.new_ids == ["f", "c"] and result.final_passage_ids == ["a", "b", "f", "c"]
    assert "directed by Terry Richardson" in prompts[-1]
    assert result.answer.endswith("So the answer is Terry Richardson.") and result.answer_check["kept"] == "second"
    # the question's next passages (the default look) never reach the bridge article with two passages
    plain = ActiveRAG.from_preset("look-again-grounded", _reader()[0], Wiki(), top_k=2).run(QUESTION)
    assert plain.retrievals[1].new_ids == ["d", "f"] and "c" not in plain.final_passage_ids
    assert AnswerCheck(query="linked").look_query(QUESTION, "draft text") == QUESTION


def printed(retrieval) -> list[str]:  # type: ignore[no-untyped-def]
    """The lines ``ask`` prints for ``retrieval``."""
    import io

    from active_rag.cli.commands import _print_retrieval

    out = io.StringIO()
    _print_retrieval(retrieval, out)
    return out.getvalue().splitlines()


def test_ask_prints_which_name_each_linked_passage_is_the_article_of() -> None:
    lm, _ = _reader()
    look = ActiveRAG(lm, Wiki(), **recipe("look-again-linked", top_k=3)).run(QUESTION).retrievals[1]
    lines = printed(look)
    assert "      - Paris  [f]  <- the article of 'Paris'" in lines
    assert "      - Glow (film)  [c]  <- the article of 'Glow'" in lines
    assert "      - Paul Smith  [e]  <- the article of 'Paul Smith'" in lines
    assert f"      names followed: {', '.join(look.details['names'])}" in lines and look.details["names"]
    first = printed(ActiveRAG(lm, Wiki(), **recipe("look-again-linked", top_k=3)).run(QUESTION).retrievals[0])
    assert not any("<-" in line for line in first)  # a retrieval with the question: no origin to print


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
    assert rag.describe()["follow_links"] is True and "follow_links" not in ActiveRAG(lm, Wiki(), **recipe("look-again-linked")).describe()
    # without the links the same reader, with the question's passages only, guesses
    plain = ActiveRAG(lm, Wiki(), trigger="once", query="input", context="accumulate", top_k=2).run(QUESTION)
    assert plain.answer.endswith("So the answer is Annie Morton.") and len(plain.retrievals) == 1


def test_a_context_with_hub_leaves_the_hub_out_of_the_linked_look_and_the_trace_names_it() -> None:
    """``accumulate:hub=1``: a name that at least 0.1% of the passages, and at least 20, mention is not followed
    (:func:`follow_links`' ``hub``); the trace lists it under ``hubs``; without ``hub`` the look is as before."""
    city = [Passage(id=f"p{i}", title=f"Street {i}", text=f"Street {i} is in Paris.") for i in range(25)]

    class HubWiki(Wiki):
        name_index = NameIndex.from_passages([*ALL, *city])

    lm, _ = _reader()
    plain = ActiveRAG.from_preset("sr-rag-linked", lm, HubWiki(), top_k=2).run(QUESTION)
    assert plain.retrievals[1].new_ids == ["f", "c"] and "hubs" not in plain.retrievals[1].details
    rag = ActiveRAG.from_preset("sr-rag-linked", lm, HubWiki(), top_k=2, context="accumulate:hub=1")
    linked = rag.run(QUESTION).retrievals[1]
    assert linked.details["hubs"] == ["Paris"] and "f" not in linked.new_ids and "c" in linked.new_ids
    assert rag.describe()["context"] == "accumulate(max_passages=4, hub=1)"
    assert ActiveRAG.from_preset("sr-rag-linked", lm, HubWiki(), top_k=2).describe()["context"] == "accumulate(max_passages=4)"


def test_follow_links_needs_a_first_retrieval_and_a_policy_that_keeps_it() -> None:
    from active_rag.errors import InvalidOptionError

    lm, _ = _reader()
    with pytest.raises(InvalidOptionError, match="context 'replace' would replace them.*accumulate"):
        ActiveRAG(lm, Wiki(), trigger="once", query="input", answer=AnswerStage(links=True))
    with pytest.raises(InvalidOptionError, match=r"trigger='once' or RunSettings\(initial_retrieval=True\)"):
        ActiveRAG(lm, Wiki(), trigger="fixed-sentence", query="last-sentence", context="accumulate",
                  answer=AnswerStage(links=True))
    with pytest.raises(InvalidOptionError, match=r"trigger='once' or RunSettings\(initial_retrieval=True\)"):  # never retrieves at all
        ActiveRAG(lm, Wiki(), trigger="never", query="input", context="accumulate",
                  answer=AnswerStage(links=True), settings=RunSettings(initial_retrieval=True))
    # any trigger that retrieves with the question first may follow the links, e.g. FS-RAG
    rag = ActiveRAG(lm, Wiki(), trigger="fixed-sentence", query="last-sentence", context="accumulate",
                    answer=AnswerStage(links=True), settings=RunSettings(initial_retrieval=True), top_k=2)
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
    from research.linked_recall import recall_table

    examples = [Example(id="q1", question=QUESTION, answers=["Terry Richardson"], kind="qa", gold_passage_ids=["a", "c"]),
                Example(id="q2", question=QUESTION, answers=["x"], kind="qa", gold_passage_ids=["a", "d"]),
                Example(id="q3", question=QUESTION, answers=["x"], kind="qa")]  # no gold ids: left out
    table = recall_table(Wiki(), examples, top_k=2, more=2)
    assert table["first"]["all_gold"] == 0.0
    # the question's next two are d and f: q2 only; the linked two are f and c: q1 only; c is the one the question's
    # ranking would not have added (f it would), and it is gold for q1, not for q2
    assert table["question"] == {"all_gold": 50.0, "new_evidence": 50.0, "linked": 0.0, "linked_without_gold": 0.0,
                                 "calls": 2.0, "max_calls": 2.0}
    assert table["linked"] == {"all_gold": 50.0, "new_evidence": 50.0, "linked": 1.0, "linked_without_gold": 0.5,
                               "calls": 1.0, "max_calls": 1.0}  # the first retrieval only: k filled from the name index
    # the look before the name index finds the same two, asking the retriever once per name (four) and the question
    assert table["per-name"] == {**table["linked"], "calls": 6.0, "max_calls": 6.0}
    with pytest.raises(ValueError, match="gold passage ids"):
        recall_table(Wiki(), examples[2:])


def test_the_recall_tool_refuses_an_empty_second_retrieval(capsys: pytest.CaptureFixture[str]) -> None:
    from research.linked_recall import main

    assert main(["--dataset", "hotpotqa", "--more", "0"]) == 2
    assert "--more must be at least 1" in capsys.readouterr().err


def test_the_recall_tool_names_a_missing_data_folder(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from research.linked_recall import main

    assert main(["--dataset", "hotpotqa", "--data-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: The hotpotqa question file") and "nowhere" in err.splitlines()[0]


def test_the_recall_tool_hides_titles_and_measures_the_name_index_by_the_real_ones() -> None:
    from active_rag.evaluation.datasets import Example
    from research.linked_recall import hide_titles, name_index_hits, recall_table
    from active_rag.retrieval.bm25 import BM25Index

    index = BM25Index.from_passages(ALL)
    hidden = hide_titles(index)
    assert [p.title for p in hidden.passages][:2] == ["doc-0.txt", "doc-1.txt"]
    assert [p.id for p in hidden.passages] == [p.id for p in ALL]  # the gold passages are the same passages
    titles = {p.id: p.title for p in ALL}
    examples = [Example(id="q1", question=QUESTION, answers=["x"], kind="qa", gold_passage_ids=["c", "e"])]
    # by text alone: "Glow (film)" finds C ("Glow was ...") first and G ("Glow sticks ...") after it
    assert name_index_hits(hidden.name_index, examples, titles) == {"gold": 2, "first": 100.0, "found": 100.0,
                                                                     "passages": 1.5}
    # the first two passages are A and B; their links, found by text alone, are Paris's and Glow's; the look that
    # needed titles finds neither, and the question's next two (C and H) hold no Paris
    table = recall_table(hidden, [Example(id="q", question=QUESTION, answers=["x"], kind="qa",
                                          gold_passage_ids=["a", "f"])], top_k=2, more=2)
    assert table["per-name"]["all_gold"] == 0.0 and table["linked"]["all_gold"] == 100.0


def test_without_fill_the_questions_next_passages_come_only_when_no_link_was_found() -> None:
    wiki = Wiki()
    filled = follow_links(wiki, [A], QUESTION, 4, {"a"})
    assert [p.id for p in filled.passages] == ["f", "c", "e", "b"] and filled.retriever_calls == 1
    assert filled.linked_from == {"f": "a", "c": "a", "e": "a"}  # the filler "b" is nobody's article
    wiki.queries.clear()
    links = follow_links(wiki, [A], QUESTION, 4, {"a"}, fill=False)
    assert [p.id for p in links.passages] == ["f", "c", "e"] and links.retriever_calls == 0 and not wiki.queries
    # no name's article: the question's next passages, with one retriever call
    none = follow_links(NoNames(), [D], QUESTION, 2, {"d"}, fill=False)
    assert none.names == [] and [p.id for p in none.passages] == ["a", "b"] and none.retriever_calls == 1


def test_read_links_puts_each_article_beside_the_passage_that_named_it_and_leaves_the_fillers_out() -> None:
    lm, prompts = _reader()
    rag = ActiveRAG(lm, Wiki(), trigger="once", query="input", context="read-links", top_k=3,
                    answer=AnswerStage(options=True, links=True))
    result = rag.run(QUESTION)
    first, linked = result.retrievals
    assert first.passage_ids == ["a", "b", "d"]
    # A names Paris, Glow and Paul Smith: their articles follow A, before B and D; the look asked nothing
    assert linked.details["linked_from"] == {"f": "a", "c": "a", "e": "a"} and linked.retriever_calls == 0
    assert result.final_passage_ids == ["a", "f", "c", "e", "b", "d"]
    assert linked.to_dict()["linked_from"] == {"f": "a", "c": "a", "e": "a"}
    prompt = prompts[-1]
    assert prompt.index("Annie Morton starred") < prompt.index("Paris is a city") < prompt.index("Annie Morton is an")
    # beside=0: the same passages in accumulate's order (the articles after every held passage)
    plain = ActiveRAG(lm, Wiki(), trigger="once", query="input", context="read-links:beside=0",
                      answer=AnswerStage(links=True), top_k=3).run(QUESTION)
    assert plain.final_passage_ids == ["a", "b", "d", "f", "c", "e"]
    # accumulate fills with the question's next passages when the links leave room; read-links does not
    two = ActiveRAG(lm, Wiki(), trigger="once", query="input", context="read-links",
                    answer=AnswerStage(links=True), top_k=2)
    assert two.run(QUESTION).final_passage_ids == ["a", "f", "c", "b"]


class NoNames(Wiki):
    """The same retriever whose name index knows only a passage no one names."""

    name_index = NameIndex.from_passages([D])


def test_read_links_fills_with_the_questions_next_passages_when_no_link_is_found() -> None:
    lm, _ = _reader()
    result = ActiveRAG(lm, NoNames(), trigger="once", query="input", context="read-links",
                       answer=AnswerStage(links=True), top_k=2).run(QUESTION)
    assert result.retrievals[1].details["articles"] == {} and result.final_passage_ids == ["a", "b", "d", "f"]


def test_the_recall_tools_budget_keeps_the_first_links_by_the_questions_form_and_refuses_a_bad_budget(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--budget OPEN,CHOICE,SHARE``: an open question keeps its first ``OPEN`` links (and any whose passage scores
    ``SHARE`` times the least relevant first passage); the question's next passages fill the rest."""
    from active_rag.evaluation.datasets import Example
    from research.linked_recall import CountingRetriever, added_passages, main, recall_table

    example = Example(id="q1", question=QUESTION, answers=["x"], kind="qa", gold_passage_ids=["a", "c"])
    retriever = CountingRetriever(Wiki())
    _, added, _ = added_passages(retriever, example, 2, 2, budget=(1, 1, 1e9))
    assert added["choose"] == ["f", "c"] and added["budget"] == ["f", "d"]  # the second link (c) gives way to d
    assert added_passages(retriever, example, 2, 2, budget=(0, 0, 1e9))[1]["budget"] == ["d", "f"]  # the question's
    assert added_passages(retriever, example, 2, 2, budget=(0, 0, 0.0))[1]["budget"] == ["f", "c"]  # every score
    table = recall_table(Wiki(), [example], top_k=2, more=2, budget=(1, 1, 1e9))
    assert table["choose"]["all_gold"] == 100.0 and table["budget"]["all_gold"] == 0.0
    assert "budget" not in recall_table(Wiki(), [example], top_k=2, more=2)
    assert main(["--dataset", "hotpotqa", "--budget", "1,two,0.5"]) == 2
    assert "--budget '1,two,0.5' is not OPEN,CHOICE,SHARE" in capsys.readouterr().err
