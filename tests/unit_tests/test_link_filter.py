"""The learned link filter (:mod:`active_rag.answer.link_filter`): a linked look reads a name's passage only when the
filter scores it likely gold; the question's own names are always read; the trace says what was left out."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from active_rag import ActiveRAG, Passage
from active_rag.answer.link_filter import FEATURES, LinkFilter, default_link_filter, describe_links, link_vector
from active_rag.answer.links import follow_links
from active_rag.errors import InvalidOptionError
from active_rag.retrieval.name_index import NameIndex
from tests.encoders import HashEncoder
from tests.unit_tests.test_answer_check import _reader
from tests.unit_tests.test_linked import ALL, QUESTION, A, B, Wiki

#: 25 passages that mention Paris: a hub
CITY = [Passage(id=f"p{i}", title=f"Street {i}", text=f"Street {i} is in Paris.") for i in range(25)]


class HubWiki(Wiki):
    name_index = NameIndex.from_passages([*ALL, *CITY])


def _hub_filter(encoder: HashEncoder | None = None, threshold: float = 0.5) -> LinkFilter:
    """Keeps a link unless many passages mention its name: bias +4, log(1 + mentions) -2 (others 0, unscaled)."""
    weights = [0.0] * len(FEATURES)
    weights[FEATURES.index("bias")] = 4.0
    weights[FEATURES.index("log(1 + mentions)")] = -2.0
    link_filter = LinkFilter(tuple(weights), (0.0,) * len(FEATURES), (1.0,) * len(FEATURES), threshold, "test")
    link_filter._encoder = encoder or HashEncoder()
    return link_filter


def test_a_filtered_name_leaves_and_the_questions_next_passage_fills_its_place() -> None:
    plain = follow_links(HubWiki(), [A, B], QUESTION, 3, held={"a", "b"})
    assert plain.names == ["Paris", "Glow", "Paul Smith"] and plain.scores == {} and plain.filtered == []
    encoder = HashEncoder()
    links = follow_links(HubWiki(), [A, B], QUESTION, 3, held={"a", "b"}, link_filter=_hub_filter(encoder))
    assert links.filtered == ["Paris"] and set(links.scores) == {"Paris", "Glow", "Paul Smith"}
    assert links.scores["Paris"] < 0.5 < links.scores["Glow"]
    # Glow's and Paul Smith's articles, then the question's next passage in Paris's place
    assert links.sources == [(ALL[2], "Glow"), (ALL[4], "Paul Smith"), (ALL[3], None)]
    assert "f" not in links.linked_from
    # one encoding a look: the question, the first passages, each link's passage and mentioning sentence
    assert len(encoder.calls) == 1 and len(encoder.calls[0]) == 1 + 2 + 2 * 3


def test_the_questions_own_names_are_never_scored_nor_left_out() -> None:
    terry = Passage(id="t", title="Terry Richardson", text="Terry Richardson (born 1965) is a photographer.")
    annie = Passage(id="m", title="Annie Morton", text="Annie Morton is a model born in 1969.")

    class People(Wiki):
        name_index = NameIndex.from_passages([terry, annie, *CITY])

        def retrieve(self, query: str, k: int) -> list[Passage]:
            return [terry, annie, *CITY][:k]

    question = "Who is older, Annie Morton or Terry Richardson?"
    encoder = HashEncoder()
    everything_out = _hub_filter(encoder, threshold=1.0)  # no link the question does not name could pass
    links = follow_links(People(), [], question, 3, held=set(), link_filter=everything_out)
    assert links.articles == {"m": "Annie Morton", "t": "Terry Richardson"} and links.scores == {}
    assert encoder.calls == []  # nothing to score: nothing encoded


def test_describe_links_and_the_vector_match_the_features() -> None:
    index = HubWiki.name_index
    assert index is not None
    paris = next(p for p in ALL if p.id == "f")
    q = describe_links(QUESTION, [A, B], [(paris, "Paris")], {"f": "a"}, set(), index, HashEncoder(), options=False)
    link = q["links"][0]
    assert link["srank"] == 0 and link["mentions"] == index.mentions("Paris") and not link["qname"]
    assert q["floor"] > 0 and -1.0 <= q["emb_floor"] <= 1.0 and -1.0 <= link["sent_emb"] <= 1.0
    vector = link_vector(q, link)
    assert len(vector) == len(FEATURES) and vector[:4] == [1.0, 1.0, 0.0, 0.0]  # the bias, the first link
    assert vector[FEATURES.index("log(1 + mentions)")] == pytest.approx(math.log1p(link["mentions"]))
    assert vector[FEATURES.index("links a question")] == 1.0


def test_a_filter_saves_and_loads_and_refuses_other_features(tmp_path: Path) -> None:
    saved = _hub_filter()
    path = tmp_path / "filter.json"
    saved.save(path)
    loaded = LinkFilter.load(path)
    assert loaded == saved and loaded.fitted_on == "test"
    data = json.loads(path.read_text())
    data["features"] = data["features"][:-1]
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidOptionError, match="other features.*--save"):
        LinkFilter.load(path)
    with pytest.raises(InvalidOptionError, match="needs 13 weights"):
        LinkFilter((1.0,), (0.0,), (1.0,), 0.5)
    with pytest.raises(InvalidOptionError, match=r"probability in \[0, 1\]"):
        LinkFilter(saved.weights, saved.mean, saved.scale, 1.5)


def test_the_shipped_filter_prefers_a_rare_name_and_a_relevant_sentence() -> None:
    shipped = default_link_filter()
    assert shipped is default_link_filter() and 0.0 < shipped.threshold < 0.5 and "2wiki-union" in shipped.fitted_on

    def probability(mentions: int, sent_emb: float) -> float:
        link = {"qname": False, "rel": 5.0, "sent_rel": 5.0, "mentions": mentions, "emb": 0.3, "sent_emb": sent_emb,
                "srank": 0}
        return shipped.probability({"floor": 10.0, "emb_floor": 0.3, "options": False, "links": [link]}, link)

    assert probability(500, 0.4) < probability(2, 0.4)  # a hub is less likely the bridge
    assert probability(2, 0.1) < probability(2, 0.7)  # a sentence close to the question more likely


def test_a_context_with_link_filter_leaves_the_name_out_and_the_trace_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """``accumulate:link_filter=1`` reads the shipped filter (here one that leaves hubs out); the trace holds every
    score and the names left out; without it the look and the description are as before."""
    monkeypatch.setattr("active_rag.engine.retrieving.default_link_filter", _hub_filter)
    lm, _ = _reader()
    plain = ActiveRAG.from_preset("sr-rag-linked", lm, HubWiki(), top_k=2)
    looked = plain.run(QUESTION).retrievals[1]
    assert looked.new_ids == ["f", "c"] and "filtered" not in looked.details and "link_scores" not in looked.details
    assert plain.describe()["context"] == "accumulate(max_passages=4)"  # rows written before the filter keep their key
    rag = ActiveRAG.from_preset("sr-rag-linked", lm, HubWiki(), top_k=2, context="accumulate:link_filter=1")
    linked = rag.run(QUESTION).retrievals[1]
    assert linked.details["filtered"] == ["Paris"] and "f" not in linked.new_ids and "c" in linked.new_ids
    assert set(linked.details["link_scores"]) == {"Paris", "Glow", "Paul Smith"}
    row = linked.to_dict()  # what an eval row's trace keeps
    assert row["filtered"] == ["Paris"] and row["link_scores"] == linked.details["link_scores"]
    from tests.unit_tests.test_linked import printed  # what `active-rag ask` prints of the look

    line = next(line for line in printed(linked) if line.startswith("      link filter: "))
    assert "Paris 0.0" in line and "(not read)" in line and line.count("(not read)") == 1
    assert rag.describe()["context"] == "accumulate(max_passages=4, link_filter=1)"
    focus = ActiveRAG.from_preset("sr-rag-linked", lm, HubWiki(), top_k=2, context="focus:link_filter=1")
    assert focus.context.for_look("compare").link_filter == 1  # a comparison's look keeps the filter
    with pytest.raises(InvalidOptionError, match="link_filter"):
        ActiveRAG.from_preset("sr-rag-linked", lm, HubWiki(), top_k=2, context="accumulate:link_filter=2")
