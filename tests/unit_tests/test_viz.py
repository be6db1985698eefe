"""Unit tests of active_rag.viz: the plots read the engine's trace (tiny model runs and hand-made results),
show the expected rows, labels, highlighted cells and markers, and save to PNG."""

from __future__ import annotations

import io
import math

import pytest
from matplotlib.patches import Rectangle

from active_rag import ActiveRAG, LowConfidenceTrigger, RindTrigger
from active_rag.viz import plots as viz
from active_rag.types import (
    ActiveRAGResult,
    Passage,
    Retrieval,
    TokenStep,
    TriggerDecision,
)

QUESTION = "Who is Kasper Schmeichel's father?"
PNG = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------------ helpers
def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    return buf.getvalue()


def patches(fig, gid: str) -> list[Rectangle]:
    return [p for ax in fig.axes for p in ax.patches if p.get_gid() == gid]


def heat_axes(fig) -> dict[str, object]:
    """Signal name -> the axes of its heat-map row."""
    out = {}
    for ax in fig.axes:
        for im in ax.get_images():
            gid = im.get_gid() or ""
            if gid.startswith("heatmap:"):
                out[gid.split(":", 1)[1]] = ax
    return out


def step(i: int, text: str, p: float, h: float = 1.0) -> TokenStep:
    return TokenStep(id=i, text=text, logprob=math.log(p), entropy=h, position=100 + i)


def handmade_dragin() -> ActiveRAGResult:
    """Output tokens A B C D E F; segment 1 (A B C) checked without firing; segment 2 checked from D, fired at
    its second token 'X' (discarded, RIND 0.9 > 0.5); retrieval before output token 4; E F unchecked."""
    tokens = [step(0, "A", 0.9), step(1, " B", 0.5), step(2, " C", 0.8), step(3, " D", 0.7), step(4, " E", 0.6),
              step(5, " F", 0.95)]
    d1 = TriggerDecision(
        fire=False, trigger="rind", index=1, token=" B", score=0.4, threshold=0.5, token_scores=[0.1, 0.4, 0.2],
        token_signals={"prob": [0.9, 0.5, 0.8], "entropy": [1.0, 1.0, 1.0], "max_attention": [0.1, 0.4, 0.2],
                       "semantic": [1.0, 1.0, 1.0], "rind": [0.1, 0.4, 0.2]},
        output_start=0,
    )
    d2 = TriggerDecision(
        fire=True, trigger="rind", index=1, token=" X", score=0.9, threshold=0.5, token_scores=[0.3, 0.9, 0.7],
        token_signals={"prob": [0.7, 0.2, 0.6], "entropy": [1.0, 3.0, 1.0], "max_attention": [0.3, 0.3, 0.7],
                       "semantic": [1.0, 1.0, 1.0], "rind": [0.3, 0.9, 0.7]},
        output_start=3,
    )
    r = Retrieval(position=4, query="Schmeichel father", passages=[Passage("p1", "text", title="Peter Schmeichel")],
                  trigger="rind", token=" X", score=0.9, threshold=0.5)
    return ActiveRAGResult(question=QUESTION, answer="A B C D E F", method="dragin", retrievals=[r],
                           decisions=[d1, d2], tokens=tokens, generated_tokens=9)


def handmade_flare() -> ActiveRAGResult:
    """FLARE: an initial retrieval, then a look-ahead fired at its token 2 (p=0.3 < 0.8) and was regenerated as
    the output P Q R; the decision carries token_scores only (as an older result would)."""
    tokens = [step(0, "P", 0.99), step(1, " Q", 0.6), step(2, " R", 0.9)]
    d = TriggerDecision(fire=True, trigger="low-confidence", index=2, token=" Z", score=0.3, threshold=0.8,
                        token_scores=[0.9, 0.85, 0.3, 0.95], output_start=0)
    r0 = Retrieval(position=0, query=QUESTION, passages=[], trigger="low-confidence", reason="initial retrieval")
    r1 = Retrieval(position=0, query="masked query", passages=[], trigger="low-confidence", token=" Z", score=0.3,
                   threshold=0.8)
    return ActiveRAGResult(question=QUESTION, answer="P Q R", method="flare", retrievals=[r0, r1], decisions=[d],
                           tokens=tokens)


@pytest.fixture
def dragin_result(tiny_lm, fake_retriever) -> ActiveRAGResult:
    rag = ActiveRAG.from_preset("dragin", tiny_lm, fake_retriever, trigger=RindTrigger(theta=0.0, max_tokens=8, scale="raw"),
                                max_new_tokens=20, keep_attention=True)
    return rag.run(QUESTION)


@pytest.fixture
def flare_result(tiny_lm, fake_retriever) -> ActiveRAGResult:
    rag = ActiveRAG.from_preset("flare", tiny_lm, fake_retriever, trigger=LowConfidenceTrigger(theta=0.9, max_tokens=6),
                                max_new_tokens=12)
    return rag.run(QUESTION)


# ------------------------------------------------------------------------------------ the engine's trace
def test_decisions_record_their_place_and_every_signal(dragin_result):
    assert dragin_result.decisions and len(dragin_result.retrievals) >= 2
    starts = [d.output_start for d in dragin_result.decisions]
    assert starts[0] == 0 and all(s is not None for s in starts)
    for d, r in zip([d for d in dragin_result.decisions if d.fire], dragin_result.retrievals, strict=False):
        # truncation: the output keeps the words before the one that holds the triggering token
        assert d.output_start <= r.position <= d.output_start + d.index
        assert set(d.token_signals) == {"prob", "entropy", "max_attention", "semantic", "rind"}
        assert d.token_signals["rind"] == d.token_scores
        h, a, s = (d.token_signals[k][d.index] for k in ("entropy", "max_attention", "semantic"))
        assert d.score == pytest.approx(h * a * s)


def test_low_confidence_decisions_record_prob_and_entropy(flare_result):
    d = flare_result.decisions[0]
    assert d.output_start == 0
    assert d.token_signals["prob"] == d.token_scores
    assert len(d.token_signals["entropy"]) == len(d.token_scores)


# ------------------------------------------------------------------------------------ token signal table
def test_table_maps_decisions_onto_the_accepted_output():
    result = handmade_dragin()
    rows = viz.token_signal_table(result)
    assert [r["text"] for r in rows] == ["A", " B", " C", " D", " X", " E", " F"]
    assert [r["kind"] for r in rows] == ["accepted"] * 4 + ["fired"] + ["accepted"] * 2
    assert [r["output_index"] for r in rows] == [0, 1, 2, 3, None, 4, 5]
    assert [r["checked"] for r in rows] == [True, True, True, True, True, False, False]
    assert [r["rind"] for r in rows[:5]] == [0.1, 0.4, 0.2, 0.3, 0.9]
    assert all(math.isnan(r["rind"]) for r in rows[5:])
    assert rows[4]["retrieval"] == 0 and rows[4]["prob"] == 0.2 and rows[4]["entropy"] == 3.0
    # probability and entropy of accepted tokens come from the output itself
    assert rows[5]["prob"] == pytest.approx(0.6)


def test_table_of_a_regenerated_look_ahead():
    rows = viz.token_signal_table(handmade_flare())
    assert [(r["kind"], r["text"]) for r in rows] == [("fired", " Z"), ("accepted", "P"), ("accepted", " Q"), ("accepted", " R")]
    assert rows[0]["prob"] == 0.3 and rows[0]["retrieval"] == 1  # R1 is the initial retrieval, R2 the fired one
    assert not any(r["checked"] for r in rows[1:])  # the regenerated sentence is accepted without a check


def test_table_of_a_fixed_length_run_marks_the_token_before_each_retrieval():
    tokens = [step(i, f" w{i}", 0.9) for i in range(6)]
    decisions = [TriggerDecision(fire=True, trigger="fixed-length", token=" w2", output_start=0),
                 TriggerDecision(fire=True, trigger="fixed-length", token=" w5", output_start=3)]
    retrievals = [Retrieval(position=p, query=f"q{p}", passages=[], trigger="fixed-length") for p in (0, 3, 6)]
    result = ActiveRAGResult(question="q", answer="", method="fl-rag", retrievals=retrievals, decisions=decisions,
                             tokens=tokens)
    rows = viz.token_signal_table(result)
    assert all(r["kind"] == "accepted" for r in rows)
    assert [r["retrieval"] for r in rows] == [None, None, 1, None, None, 2]  # R1 is the initial retrieval
    fig = viz.plot_token_signals(result, signals=("prob",))
    tags = sorted(t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == "retrieval-label")
    assert tags == ["R1 (input) ▸", "R2", "R3"]


def test_table_of_a_real_run_keeps_every_output_token_in_order(dragin_result):
    rows = viz.token_signal_table(dragin_result)
    accepted = [r for r in rows if r["kind"] == "accepted"]
    assert [r["text"] for r in accepted] == [t.text for t in dragin_result.tokens]
    fired = [r for r in rows if r["kind"] == "fired"]
    assert len(fired) == sum(d.fire for d in dragin_result.decisions)
    for r in fired:
        retrieval = dragin_result.retrievals[r["retrieval"]]
        assert r["rind"] == pytest.approx(retrieval.score)
        following = rows[r["column"] + 1 :]
        next_accepted = next((x for x in following if x["kind"] == "accepted"), None)
        if next_accepted is not None:  # the fired token sits right where the retrieval happened
            assert next_accepted["output_index"] == retrieval.position


# ------------------------------------------------------------------------------------ heat map
def test_heat_map_rows_labels_and_highlights():
    result = handmade_dragin()
    fig = viz.plot_token_signals(result)
    rows = heat_axes(fig)
    assert list(rows) == ["prob", "entropy", "max_attention", "rind"]
    labels = [t.get_text() for t in rows["rind"].get_xticklabels()]
    assert labels == ["A", " B", " C", " D", " X", " E", " F"]
    red = [t.get_text() for t in rows["rind"].get_xticklabels() if t.get_color() == viz._FIRED]
    assert red == [" X"]
    assert "θ=0.5" in rows["rind"].get_ylabel()
    # the fired column is outlined in every row, at column 4
    fired = patches(fig, "fired")
    assert len(fired) == 4 and {p.get_x() for p in fired} == {3.5}
    # only the cells past the threshold on the threshold row: rind 0.9 (column 4) and 0.7 is not shown (discarded)
    crossing = patches(fig, "threshold")
    assert [p.get_x() for p in crossing] == [3.5]
    assert sum(1 for ax in fig.axes for ln in ax.lines if ln.get_gid() == "threshold-line") == 1
    assert any(t.get_text() == "R1" for t in rows["prob"].texts)
    assert png_bytes(fig).startswith(PNG)


def test_heat_map_threshold_override_and_signal_choice():
    fig = viz.plot_token_signals(handmade_dragin(), signals=("rind",), threshold=0.15)
    assert list(heat_axes(fig)) == ["rind"]
    # rind > 0.15: B (0.4), C (0.2), D (0.3), X (0.9)
    assert sorted(p.get_x() for p in patches(fig, "threshold")) == [0.5, 1.5, 2.5, 3.5]
    with pytest.raises(ValueError, match="Unknown signal"):
        viz.plot_token_signals(handmade_dragin(), signals=("rind", "bogus"))


def test_heat_map_of_flare_marks_low_probability():
    fig = viz.plot_token_signals(handmade_flare(), signals=("prob", "entropy"))
    rows = heat_axes(fig)
    assert "<" in rows["prob"].get_ylabel() and "0.8" in rows["prob"].get_ylabel()
    # p < 0.8: the fired Z (0.3) and Q (0.6)
    assert sorted(p.get_x() for p in patches(fig, "threshold")) == [-0.5, 1.5]
    assert {p.get_x() for p in patches(fig, "fired")} == {-0.5}
    assert any("(input)" in t.get_text() for t in rows["prob"].texts)
    assert png_bytes(fig).startswith(PNG)


def test_heat_map_of_a_tiny_model_run(dragin_result):
    fig = viz.plot_token_signals(dragin_result)
    rows = viz.token_signal_table(dragin_result)
    fired = sum(r["kind"] == "fired" for r in rows)
    assert len(heat_axes(fig)["rind"].get_xticklabels()) == len(rows)
    assert len(patches(fig, "fired")) == 4 * fired
    assert png_bytes(fig).startswith(PNG)


def test_heat_map_text_is_never_mathtext():
    result = handmade_dragin()
    result.tokens[0].text = "$5"
    result.tokens[1].text = " a$b$c\n"
    fig = viz.plot_token_signals(result, signals=("prob",))
    labels = [t.get_text() for t in heat_axes(fig)["prob"].get_xticklabels()]
    assert labels[0] == r"\$5" and labels[1] == r" a\$b\$c↵"
    assert png_bytes(fig).startswith(PNG)


# ------------------------------------------------------------------------------------ QFS attention
def test_qfs_attention_of_a_tiny_model_retrieval(dragin_result):
    retrieval = dragin_result.retrievals[-1]
    d = retrieval.details
    fig = viz.plot_qfs_attention(retrieval)
    bars = [p for p in fig.axes[0].patches if p.get_gid() in ("selected", "context")]
    assert len(bars) == len(d["context_tokens"])
    chosen = set(d["selected_positions"]) & set(d["context_positions"])
    assert sum(p.get_gid() == "selected" for p in bars) == len(chosen)
    assert [p.get_height() for p in bars] == pytest.approx(d["weights"])
    assert retrieval.query[:40] in fig._suptitle.get_text()
    assert len(patches(fig, "trigger")) == 1
    assert png_bytes(fig).startswith(PNG)


def test_qfs_attention_highlights_exactly_the_chosen_words():
    details = {
        "trigger_token": " born",
        "context_tokens": ["Who", " is", " Kasper", "'s", " father", "?", " He", " was"],
        "context_positions": [10, 11, 12, 13, 14, 15, 40, 41],
        "weights": [0.01, 0.02, 0.30, 0.05, 0.25, 0.01, 0.10, 0.02],
        "selected_positions": [12, 14, 40],
        "selected_words": [" Kasper", " father", " He"],
    }
    r = Retrieval(position=2, query="Kasper father", passages=[], trigger="rind", token=" born", details=details)
    fig = viz.plot_qfs_attention(r)
    bar_ax, text_ax = fig.axes[0], fig.axes[1]
    selected_bars = [i for i, p in enumerate(bar_ax.patches) if p.get_gid() == "selected"]
    assert selected_bars == [2, 4, 6]
    boxed = [p for p in text_ax.patches if p.get_gid() == "selected"]
    assert len(boxed) == 3
    bold = [t.get_text() for t in text_ax.texts if t.get_fontweight() == "bold" and "born" not in t.get_text()]
    assert bold == [" Kasper", " father", " He"]
    # question and output are separate runs, with a separator between them
    assert any("question" in t.get_text() for t in text_ax.texts)
    assert any("output before the trigger" in t.get_text() for t in text_ax.texts)
    assert png_bytes(fig).startswith(PNG)


def test_qfs_attention_needs_attention_details():
    with pytest.raises(ValueError, match="AttentionQuery"):
        viz.plot_qfs_attention(Retrieval(position=0, query="q", passages=[], trigger="once"))


# ------------------------------------------------------------------------------------ comparison, timeline
def test_compare_methods_side_by_side(dragin_result, flare_result):
    fig = viz.compare_methods({"FLARE": flare_result, "DRAGIN": dragin_result})
    lane_ax = fig.axes[0]
    assert [t.get_text() for t in lane_ax.get_yticklabels()] == ["FLARE", "DRAGIN"]
    for name, res in (("FLARE", flare_result), ("DRAGIN", dragin_result)):
        ticks = [ln for ln in lane_ax.lines if ln.get_gid() == f"retrieval:{name}"]
        assert [ln.get_xdata()[0] + 0.5 for ln in ticks] == [r.position for r in res.retrievals]
    titles = [ax.get_title(loc="left") for ax in fig.axes[1:]]
    assert titles == ["FLARE", "DRAGIN"]
    body = fig.axes[2].texts[0].get_text()
    assert "⟦R1⟧" in body and dragin_result.retrievals[0].query[:20] in body.replace("\n", " ")
    assert png_bytes(fig).startswith(PNG)
    with pytest.raises(ValueError):
        viz.compare_methods({})


def test_compare_methods_marks_the_retrieval_point_in_the_answer():
    fig = viz.compare_methods({"dragin": handmade_dragin()})
    body = fig.axes[1].texts[0].get_text()
    assert "A B C D ⟦R1⟧  E F" in body
    assert "query: Schmeichel father" in body and "Peter Schmeichel" in body


def test_retrieval_timeline(dragin_result):
    fig = viz.plot_retrieval_timeline(dragin_result)
    ax = fig.axes[0]
    lines = [ln for ln in ax.lines if ln.get_gid() == "retrieval"]
    assert sorted(ln.get_xdata()[0] + 0.5 for ln in lines) == sorted(r.position for r in dragin_result.retrievals)
    labels = [t.get_text() for t in ax.texts if t.get_gid() == "retrieval-label"]
    assert len(labels) == len(dragin_result.retrievals)
    assert png_bytes(fig).startswith(PNG)


def test_retrieval_timeline_annotates_queries_and_handles_no_retrieval():
    fig = viz.plot_retrieval_timeline(handmade_flare())
    labels = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "retrieval-label"]
    assert len(labels) == 2
    assert "before generation" in labels[0] and f"q: {QUESTION}" in labels[0]
    assert "q: masked query" in labels[1] and "0.3 vs θ=0.8" in labels[1]
    empty = ActiveRAGResult(question="q", answer="", method="wo-rag", tokens=[step(0, "x", 0.5)])
    fig = viz.plot_retrieval_timeline(empty)
    assert any(t.get_text() == "no retrieval" for t in fig.axes[0].texts)
    assert png_bytes(fig).startswith(PNG)
