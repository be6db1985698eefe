"""The name index (:mod:`active_rag.retrieval.name_index`): which passages are about which name, from their titles or, when
titles are file names or missing, from how their text opens; chunks of one source share it; saved with the index."""

from __future__ import annotations

import json

import pytest

from active_rag import Passage
from active_rag.answer.links import follow_links
from active_rag.retrieval.name_index import (
    NameIndex,
    attach_name_index,
    is_file_name,
    name_index_of,
    name_key,
    text_subjects,
)
from active_rag.retrieval.bm25 import BM25Index

#: a company's documents as a user indexes them: titled by file name, or not titled at all
PRODUCTS = Passage(id="products.md", title="products.md", text="# Products\nAcme sells Orion and Vega to banks.")
ORION_1 = Passage(id="orion.md#1", title="orion.md (1/2)", text="Orion is our analytics platform, built in 2019.",
                  metadata={"source": "orion.md"})
ORION_2 = Passage(id="orion.md#2", title="orion.md (2/2)", text="It runs on Kubernetes and the Platform Team owns it.",
                  metadata={"source": "orion.md"})
VEGA = Passage(id="vega", title="", text="Vega (billing) is the service that invoices customers.")
TEAMS = Passage(id="teams", title="", text="Despite its size, the Platform Team runs Orion. Overall it is busy.")
DOCS = [PRODUCTS, ORION_1, ORION_2, VEGA, TEAMS]


def test_a_passage_is_about_its_title() -> None:
    glow = Passage(id="c", title="Glow (film)", text="It was directed by Terry Richardson.")
    worm = Passage(id="g", title="Glow Worm Cave Tours", text="Glow sticks are not a film.")
    index = NameIndex.from_passages([worm, glow])
    assert [p.id for p in index.articles("Glow")] == ["c"]  # the title beats a text that opens with the name
    assert [p.id for p in index.articles("Glow Worm Cave Tours")] == ["g"]
    assert index.articles("Terry Richardson") == [] and index.articles("") == []


def test_a_passage_titled_with_a_file_name_is_about_what_its_text_opens_with() -> None:
    assert is_file_name("products.md") and is_file_name("docs/teams.txt") and is_file_name("orion.md (2/2)")
    assert not is_file_name("Glow (film)") and not is_file_name("AC/DC") and not is_file_name("Node.js")
    index = NameIndex.from_passages(DOCS)
    assert [p.id for p in index.articles("Products")] == ["products.md"]  # its Markdown heading
    assert index.articles("products.md") == []  # a file name is not a name
    assert [p.id for p in index.articles("Vega")] == ["vega"]  # no title: the name its text opens with
    assert index.articles("Kubernetes") == []  # named in a text, but not what it is about
    # what a sentence's main clause opens with, after a short introduction, is what it is about
    assert [p.id for p in index.articles("the Platform Team")] == ["teams"]


def test_the_subject_of_a_text_without_a_title() -> None:
    assert text_subjects("Shirley Temple Black (April 23, 1928) was an American actress.") == ["Shirley Temple Black"]
    assert text_subjects("Kiss and Tell is a 1945 American comedy film.") == ["Kiss and Tell", "Kiss"]
    assert text_subjects("Meet Corliss Archer, a program from radio's Golden Age, ran from 1943.") == [
        "Meet Corliss Archer"]
    # sentence openers are not names: no subject, or the name after them
    assert text_subjects("Despite the program's long run, few episodes exist.") == []
    assert text_subjects("Overall, sales grew.") == []
    assert text_subjects("In 1990, Acme Corp bought Orion.") == ["Acme Corp"]
    # the name in a short introduction is where or when, not what the text is about
    assert text_subjects("In the United Kingdom, the Accession Council is a ceremonial body.") == ["Accession Council"]
    assert text_subjects("In Germany, Acme sells tractors.") == ["Acme"]
    assert text_subjects("In Norway, a State Secretary (Norwegian: x) is a politician.") == ["State Secretary"]
    assert text_subjects("On November 7, 2023, Ohio became the 24th state.") == ["Ohio"]
    # a title that opens with a pronoun and a comma is no introduction
    assert "I Love New Year" in text_subjects("I Love NY, also known as I Love New Year, is a 2015 film.")
    assert text_subjects("") == [] and text_subjects("the lower-case start of a chunk.") == []
    # "Winner" is a word the corpus writes in lower case: alone at the start of a sentence it is not a name...
    assert text_subjects("Winner said no.", common={"winner"}) == []
    # ...but a text that opens with it before a parenthesis or a verb is about it
    assert text_subjects("Winner (band) is a boy group.", common={"winner"}) == ["Winner"]


def test_a_text_that_opens_with_a_place_is_not_about_the_place() -> None:
    """A chunk without a title ("In Germany, Acme sells tractors.") is Acme's, not Germany's: a question that names
    Germany does not follow a link to it."""
    chunks = [Passage(id="acme", title="", text="In Germany, Acme sells tractors. It has 40 dealers."),
              Passage(id="germany", title="", text="Germany is a country in Central Europe.")]
    index = NameIndex.from_passages(chunks)
    assert [p.id for p in index.articles("Germany")] == ["germany"]
    assert [p.id for p in index.articles("Acme")] == ["acme"]


def test_names_match_with_a_word_more_less_or_other_but_one_word_names_only_themselves() -> None:
    black = Passage(id="s", title="", text="Shirley Temple Black (April 23, 1928) was an American actress.")
    kaiser = Passage(id="k", title="", text="Henry John Kaiser (May 9, 1882) was an American industrialist.")
    scary = Passage(id="h", title="American Scary", text="A film.")
    index = NameIndex.from_passages([black, kaiser, scary])
    assert [p.id for p in index.articles("Shirley Temple")] == ["s"]  # a word less
    assert [p.id for p in index.articles("Henry J. Kaiser")] == ["k"]  # a middle name as its initial
    assert [p.id for p in index.articles("Henry Kaiser")] == ["k"]  # first and last name
    assert index.articles("American") == [] and index.articles("Shirley") == []
    assert name_key("The Beatles") == "beatles" and name_key("Ögedei Khan's") == "ogedei khan"
    assert name_key("Tunnels &amp; Trolls") == name_key("Tunnels & Trolls")


def test_chunks_of_one_source_share_what_it_is_about() -> None:
    index = NameIndex.from_passages(DOCS)
    # the second chunk never names Orion, but its source's first chunk is about it
    assert [p.id for p in index.articles("Orion")] == ["orion.md#1", "orion.md#2"]
    # without the shared source the second chunk is about nothing
    alone = Passage(id=ORION_2.id, title=ORION_2.title, text=ORION_2.text)
    assert [p.id for p in NameIndex.from_passages([ORION_1, alone]).articles("Orion")] == ["orion.md#1"]


def test_linked_retrieval_over_a_users_files_finds_the_articles_by_text() -> None:
    index = BM25Index.from_passages(DOCS)
    links = follow_links(index, [TEAMS], "What does the platform that the Platform Team runs run on?", 2,
                         held={"teams"})
    # the names: "Orion" (not "Despite", "Overall", nor the question's "Platform Team"); its chunk that shares the
    # question's words comes first among its two
    assert links.names == ["Orion"] and links.articles == {"orion.md#2": "Orion"}
    assert [p.id for p in links.passages][0] == "orion.md#2"


def test_a_name_that_opens_many_documents_is_not_followed() -> None:
    notes = [Passage(id=f"n{i}", title=f"note-{i}.txt", text=f"Acme shipped release {i} today.") for i in range(6)]
    index = NameIndex.from_passages(notes)
    assert index.articles("Acme") == []  # six documents open with it: not one thing's own article
    assert [p.id for p in NameIndex.from_passages(notes[:2]).articles("Acme")] == ["n0", "n1"]


def test_the_name_index_is_saved_and_loaded_with_the_bm25_index(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = BM25Index.from_passages(DOCS)
    index.save(tmp_path / "idx")
    saved = json.loads((tmp_path / "idx" / "names.json").read_text(encoding="utf-8"))
    assert saved == index.name_index.to_json() and saved["names"]["orion"]

    def no_build(*args: object) -> NameIndex:
        raise AssertionError("built again")

    monkeypatch.setattr(NameIndex, "from_passages", classmethod(no_build))
    loaded = BM25Index.load(tmp_path / "idx")
    assert [p.id for p in loaded.name_index.articles("Orion")] == ["orion.md#1", "orion.md#2"]
    monkeypatch.undo()
    # an index saved before names were indexed, or by other rules, builds it again on first use
    (tmp_path / "idx" / "names.json").write_text(json.dumps({**saved, "version": -1}), encoding="utf-8")
    assert BM25Index.load(tmp_path / "idx").name_index.to_json() == saved
    (tmp_path / "idx" / "names.json").unlink()
    assert BM25Index.load(tmp_path / "idx").name_index.to_json() == saved
    # a folder holding an index and its names file can be overwritten (names.json is the index's own file)
    index.save(tmp_path / "idx", overwrite=True)
    assert (tmp_path / "idx" / "names.json").is_file()


@pytest.mark.slow
def test_building_the_name_index_takes_about_a_second_for_twenty_thousand_passages() -> None:
    import time

    passages = [Passage(id=str(i), title=f"doc-{i}.txt", text=f"Name{i} Person{i % 97} (born {1900 + i % 100}) was "
                        f"a writer who met Other{i % 13} in Paris. " * 3) for i in range(20_000)]
    start = time.process_time()
    index = NameIndex.from_passages(passages)
    assert time.process_time() - start < 20.0  # about 2 s on one idle core; generous for a shared, busy machine
    assert [p.id for p in index.articles("Name17 Person17")] == ["17"]


def test_any_retriever_can_be_given_a_name_index() -> None:
    class Remote:
        def __init__(self) -> None:
            self.calls = 0

        def retrieve(self, query: str, k: int) -> list[Passage]:
            self.calls += 1
            return []

    remote = Remote()
    assert name_index_of(remote) is None
    attached = attach_name_index(remote, DOCS)
    assert name_index_of(remote) is attached and name_index_of(Remote()) is None
    links = follow_links(remote, [TEAMS], "What runs on Kubernetes?", 1, held={"teams"})
    assert links.articles == {"orion.md#2": "Orion"} and remote.calls == 0


def test_the_evaluation_s_timed_retriever_passes_the_name_index_through() -> None:
    """``active-rag eval`` wraps its index to time the calls; linked retrieval must still find the index's names
    (else it asks the retriever once per name: 8 more calls a question)."""
    from active_rag.evaluation.method_engines import _TimedRetriever
    from active_rag.retrieval.name_index import name_index_of
    from active_rag.retrieval.bm25 import BM25Index

    index = BM25Index.demo()
    assert name_index_of(_TimedRetriever(index)) is index.name_index
