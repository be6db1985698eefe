"""Unit tests of active_rag.components.triggers on hand-made segments of ``TokenStep``s."""

from __future__ import annotations

import math

import pytest
import torch

from active_rag.errors import UnknownNameError
from active_rag.components.triggers import (
    TRIGGER_ALIASES,
    TRIGGERS,
    BracketBias,
    FixedLengthTrigger,
    FixedSentenceTrigger,
    FollowUpTrigger,
    LowConfidenceTrigger,
    NeverTrigger,
    OnceTrigger,
    RindTrigger,
    SearchTagTrigger,
    SegmentContext,
    make_trigger,
)
from active_rag.types import TokenStep


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The model is tiny: one intra-op thread is many times faster than several on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def seg(pieces: list[str], probs: list[float] | None = None, entropies: list[float] | None = None, start: int = 10) -> list[TokenStep]:
    probs = probs or [0.9] * len(pieces)
    entropies = entropies or [0.5] * len(pieces)
    return [
        TokenStep(id=100 + i, text=t, logprob=math.log(p), entropy=h, position=start + i)
        for i, (t, p, h) in enumerate(zip(pieces, probs, entropies, strict=True))
    ]


SENTENCE = seg([" Kasper", " is", " a", " Danish", " goal", "keeper", "."])


# -- never / once --------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [NeverTrigger, OnceTrigger])
@pytest.mark.parametrize("finished", [False, True])
def test_never_and_once_never_fire(cls, finished: bool) -> None:
    trigger = cls()
    low = seg([" x", " y"], probs=[0.01, 0.01], entropies=[9.0, 9.0])
    for segment in (SENTENCE, low, []):
        decision = trigger.check(SegmentContext(segment, torch.ones(20), finished=finished))
        assert decision.fire is False and decision.trigger == cls.name
    assert trigger.unit == "answer"
    assert trigger.action == {"never": "never", "once": "once"}[cls.name]


# -- fixed length / fixed sentence ---------------------------------------------------------------------
@pytest.mark.parametrize("cls, unit", [(FixedLengthTrigger, "tokens"), (FixedSentenceTrigger, "sentence")])
def test_fixed_triggers_fire_on_a_non_final_segment_and_hold_when_finished(cls, unit: str) -> None:
    trigger = cls()
    assert trigger.unit == unit and trigger.action == "continue"
    decision = trigger.check(SegmentContext(SENTENCE, None, "", finished=False))
    assert decision.fire is True
    assert decision.index is None and decision.token == "."
    assert trigger.check(SegmentContext(SENTENCE, None, "", finished=True)).fire is False
    assert trigger.check(SegmentContext([], None, "", finished=False)).fire is False


def test_fixed_length_window() -> None:
    assert FixedLengthTrigger().max_tokens == 16
    assert make_trigger("fixed-length", max_tokens=25).max_tokens == 25
    assert FixedSentenceTrigger().max_tokens == 64


# -- low confidence (FLARE) ----------------------------------------------------------------------------
def test_low_confidence_fires_and_reports_the_lowest_probability_token() -> None:
    probs = [0.95, 0.5, 0.9, 0.3, 0.99, 0.45]
    segment = seg([" Peter", " was", " born", " in", " 1963", "."], probs=probs)
    decision = LowConfidenceTrigger(theta=0.8).check(SegmentContext(segment))
    assert decision.fire is True
    assert decision.index == 3 and decision.token == " in"
    assert decision.score == pytest.approx(0.3)
    assert decision.threshold == 0.8
    assert decision.token_scores == pytest.approx(probs)
    assert "theta=0.8" in decision.reason


def test_low_confidence_holds_when_every_token_is_confident() -> None:
    probs = [0.95, 0.85, 0.99, 0.81]
    segment = seg([" Peter", " is", " Danish", "."], probs=probs)
    decision = LowConfidenceTrigger(theta=0.8).check(SegmentContext(segment))
    assert decision.fire is False
    assert decision.index == 3 and decision.score == pytest.approx(0.81)
    # the same segment fires with a stricter threshold, at the same token
    strict = LowConfidenceTrigger(theta=0.82).check(SegmentContext(segment))
    assert strict.fire is True and strict.index == 3
    assert LowConfidenceTrigger().check(SegmentContext([])).fire is False
    assert LowConfidenceTrigger().theta == 0.8 and LowConfidenceTrigger.action == "regenerate"


# -- RIND (DRAGIN) -------------------------------------------------------------------------------------
RIND_PIECES = [" The", " famous", " goal", "keeper", " is", " Peter"]
RIND_ENTROPIES = [50.0, 0.5, 2.0, 3.0, 40.0, 5.0]
RIND_AMAX = {10: 0.9, 11: 0.9, 12: 0.5, 13: 0.5, 14: 0.9, 15: 0.8}  # position -> a_max


def rind_ctx(pieces=RIND_PIECES, entropies=RIND_ENTROPIES, amax=RIND_AMAX, length: int = 16) -> SegmentContext:
    max_attention = torch.zeros(length)
    for p, a in amax.items():
        if p < length:
            max_attention[p] = a
    return SegmentContext(seg(pieces, entropies=entropies, start=10), max_attention)


def test_rind_fires_at_the_first_token_above_theta() -> None:
    # raw scale (Eq. 5 per token): The 0 (stop word, H=50), famous .45, goal 1.0, keeper 1.5, is 0, Peter 4.0
    decision = RindTrigger(theta=1.2, scale="raw").check(rind_ctx())
    assert decision.fire is True
    assert decision.index == 3 and decision.token == "keeper"
    assert decision.score == pytest.approx(1.5)
    assert decision.threshold == 1.2
    assert decision.token_scores == pytest.approx([0.0, 0.45, 1.0, 1.5, 0.0, 4.0])
    assert RindTrigger(theta=0.9, scale="raw").check(rind_ctx()).index == 2  # " goal" (1.0) comes first


def test_rind_holds_and_reports_the_maximum() -> None:
    decision = RindTrigger(theta=5.0, scale="raw").check(rind_ctx())
    assert decision.fire is False
    assert decision.index == 5 and decision.token == " Peter"
    assert decision.score == pytest.approx(4.0) and decision.threshold == 5.0


def test_rind_stop_word_with_huge_entropy_does_not_fire() -> None:
    ctx = rind_ctx([" the", " of"], [1e6, 1e6], {10: 1.0, 11: 1.0})
    decision = RindTrigger(theta=1.2).check(ctx)
    assert decision.fire is False and decision.score == 0.0


def test_rind_reads_a_max_by_session_position() -> None:
    # positions beyond the a_max vector count as 0 (no later token attended yet)
    ctx = rind_ctx(length=14)
    decision = RindTrigger(theta=1.2, scale="raw").check(ctx)
    assert decision.token_scores == pytest.approx([0.0, 0.45, 1.0, 1.5, 0.0, 0.0])
    # a_max indexed by segment index instead of position would see zeros here
    shifted = SegmentContext(seg(RIND_PIECES, entropies=RIND_ENTROPIES, start=0), torch.tensor([0.0] * 6 + [1.0] * 10))
    assert RindTrigger(theta=1.2, scale="raw").check(shifted).fire is False
    assert RindTrigger(theta=1.2).check(shifted).fire is False


def test_normalised_rind_matches_a_hand_computed_example() -> None:
    """DRAGIN's released code (AttnWeightRAG.modifier): whitespace words (entropy = mean, attention = sum of their
    tokens'), attention divided by the sentence's sum and multiplied by its word count, times entropy, s_i."""
    pieces = [" The", " famous", " goal", "keeper", " is", " Peter", "."]
    entropies = [50.0, 0.5, 2.0, 3.0, 40.0, 5.0, 1.0]
    amax = {10: 0.9, 11: 0.9, 12: 0.5, 13: 0.5, 14: 0.9, 15: 0.8, 16: 0.2}
    # words: The (H 50, a .9), famous (.5, .9), goalkeeper (2.5, 1.0), is (40, .9), Peter. (3.0, 1.0): sum a = 4.7
    famous, goalkeeper, peter = 0.5 * 0.9 / 4.7 * 5, 2.5 * 1.0 / 4.7 * 5, 3.0 * 1.0 / 4.7 * 5
    decision = RindTrigger(theta=1.2).check(rind_ctx(pieces, entropies, amax, length=20))
    assert decision.token_scores == pytest.approx([0.0, famous, goalkeeper, goalkeeper, 0.0, peter, peter])
    assert decision.fire and decision.index == 2 and decision.token == " goal"  # the word's first token
    assert decision.score == pytest.approx(2.5 / 0.94)
    assert RindTrigger(theta=3.0).check(rind_ctx(pieces, entropies, amax, length=20)).index == 5  # " Peter"
    held = RindTrigger(theta=5.0).check(rind_ctx(pieces, entropies, amax, length=20))
    assert not held.fire and held.score == pytest.approx(peter)


def test_normalised_rind_normalises_each_sentence_separately() -> None:
    pieces = [" Kasper", " plays", ".", " His", " father", " is", " Bob", "."]
    entropies = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 2.0, 0.0]
    amax = {10: 0.2, 11: 0.2, 12: 0.0, 13: 0.0, 14: 0.1, 15: 0.0, 16: 0.3, 17: 0.0}
    trigger = RindTrigger(theta=1.5)
    decision = trigger.check(rind_ctx(pieces, entropies, amax, length=20))
    # sentence 1: Kasper (H 1, a .2), plays. (H .5, a .2): attention .2/.4*2 = 1 each -> 1.0, 0.5
    # sentence 2: His, father, is, Bob. (a 0, .1, 0, .3; sum .4, n 4) -> father 1 * 1.0, Bob. 1.0 * 3.0
    assert decision.token_scores == pytest.approx([1.0, 0.5, 0.5, 0.0, 1.0, 0.0, 3.0, 3.0])
    assert decision.fire and decision.index == 6 and decision.token == " Bob"
    assert trigger.check_scores(rind_ctx(pieces, entropies, amax, length=20)) == pytest.approx([1.0, 3.0])


def test_rind_scale_and_auto_theta_are_validated() -> None:
    with pytest.raises(ValueError, match="scale"):
        RindTrigger(scale="log")
    with pytest.raises(ValueError, match="auto"):
        RindTrigger(theta="high")  # type: ignore[arg-type]
    auto = RindTrigger(theta="auto")
    assert auto.check(rind_ctx()).threshold == 1.2  # not resolved by an engine: the paper's default


def test_rind_needs_attention() -> None:
    assert RindTrigger.needs_attention and RindTrigger.action == "truncate"
    assert (RindTrigger().theta, RindTrigger().max_tokens, RindTrigger().scale) == (1.2, 100, "sentence")
    with pytest.raises(ValueError, match="capture_attention"):
        RindTrigger().check(SegmentContext(seg([" Peter"]), None))
    assert RindTrigger().check(SegmentContext([], torch.zeros(3))).fire is False


# -- search tag (FLARE-instruct) -----------------------------------------------------------------------
def test_search_tag_found_with_query_and_index_of_the_bracket() -> None:
    pieces = ["The", " keeper", " is", " [", "Search", "(", "Danish", " goal", "keeper", ")]", " Kas"]
    decision = SearchTagTrigger().check(SegmentContext(seg(pieces)))
    assert decision.fire is True
    assert decision.index == 3 and decision.token == " ["
    assert decision.query_hint == "Danish goalkeeper"
    assert SearchTagTrigger().segment_done("".join(pieces)) is True


def test_search_tag_bracket_inside_a_longer_token_and_case() -> None:
    pieces = ["Red", " is", " for", " [search(", "\"Ghana flag\"", ") ]"]
    decision = SearchTagTrigger().check(SegmentContext(seg(pieces)))
    assert decision.fire and decision.index == 3 and decision.query_hint == "Ghana flag"


@pytest.mark.parametrize(
    "pieces, index, query",
    [
        (["Peter", " [", "Search", "(", "Danish", " goal"], 1, "Danish goal"),
        (["Peter", " [Search(", "Danish", " goal", ")"], 1, "Danish goal"),  # ")" written, "]" not yet
        (["[", "Search", "("], 0, None),
    ],
)
def test_search_tag_unclosed(pieces: list[str], index: int, query: str | None) -> None:
    decision = SearchTagTrigger().check(SegmentContext(seg(pieces)))
    assert decision.fire is True and decision.index == index and decision.query_hint == query
    assert SearchTagTrigger().segment_done("".join(pieces)) is False


def test_search_tag_absent_or_empty() -> None:
    assert SearchTagTrigger().check(SegmentContext(SENTENCE)).fire is False
    assert SearchTagTrigger().check(SegmentContext(seg(["a", " [1]", " b"]))).fire is False
    empty = SearchTagTrigger().check(SegmentContext(seg(["x", " [Search()]"])))
    assert empty.fire is True and empty.query_hint is None
    assert SearchTagTrigger().segment_done("Peter [Search(Danish") is False


# -- bracket bias --------------------------------------------------------------------------------------
def test_bracket_bias_adds_bias_and_forbids_after_search(tiny_lm, tiny_tokenizer) -> None:
    processor = SearchTagTrigger().logits_processor(tiny_lm)
    assert isinstance(processor, BracketBias) and processor.bias == 2.0 and processor.forbid_tokens == 8
    vocab = len(tiny_tokenizer)
    expected = {i for i in range(vocab) if tiny_tokenizer.decode([i]).lstrip().startswith("[")}
    assert tiny_tokenizer.convert_tokens_to_ids("[") in expected
    assert set(processor.bracket_ids().tolist()) == expected
    others = torch.tensor(sorted(set(range(vocab)) - expected))

    base = torch.linspace(-1.0, 1.0, vocab)
    out = processor([1, 2, 3], base.clone())
    assert torch.equal(out[others], base[others])
    torch.testing.assert_close(out[sorted(expected)], base[sorted(expected)] + 2.0)

    processor.after_search()
    for _ in range(8):
        out = processor([1, 2, 3], base.clone())
        assert (out[sorted(expected)] == -100.0).all()
        assert torch.equal(out[others], base[others])
    out = processor([1, 2, 3], base.clone())  # the 9th token after the search: bias again
    torch.testing.assert_close(out[sorted(expected)], base[sorted(expected)] + 2.0)


def test_bracket_bias_steers_generation(tiny_lm) -> None:
    bracket = tiny_lm.tokenizer.convert_tokens_to_ids("[")
    prompt = tiny_lm.prompt_ids("Who is Peter Schmeichel?")
    huge = BracketBias(tiny_lm, bias=1e4, forbid_tokens=2)
    steps = list(tiny_lm.session(prompt).generate(3, logits_processor=huge))
    assert [s.id for s in steps] == [bracket] * 3
    huge.after_search()
    steps = list(tiny_lm.session(prompt).generate(3, logits_processor=huge))
    assert [s.id == bracket for s in steps] == [False, False, True]


# -- follow-up (self-ask) ------------------------------------------------------------------------------
def test_follow_up_question_is_extracted() -> None:
    pieces = [" Yes", ".\n", "Follow", " up", ":", " Who", " is", " Kasper", "'s", " father", "?", "\n"]
    decision = FollowUpTrigger().check(SegmentContext(seg(pieces)))
    assert decision.fire is True
    assert decision.query_hint == "Who is Kasper's father?"
    assert decision.index == 2 and decision.token == "Follow"
    assert FollowUpTrigger().segment_done("".join(pieces)) is True


def test_follow_up_last_question_wins_and_intermediate_answer_ends_it() -> None:
    text = "Follow up: Who is he?\nIntermediate answer: A director.\nFollow up: When was he born? Intermediate answer:"
    decision = FollowUpTrigger().check(SegmentContext(seg([text[:40], text[40:]])))
    assert decision.fire and decision.query_hint == "When was he born?" and decision.index == 1
    assert FollowUpTrigger().segment_done("Follow up: When was he born? Intermediate answer:")


def test_follow_up_absent_or_incomplete() -> None:
    assert FollowUpTrigger().check(SegmentContext(SENTENCE)).fire is False
    assert FollowUpTrigger().segment_done("Follow up: Who is") is False
    assert FollowUpTrigger().segment_done("So the final answer is: Denmark") is False


# -- make_trigger --------------------------------------------------------------------------------------
def test_make_trigger_by_name_and_alias() -> None:
    assert set(TRIGGERS) == {"never", "once", "fixed-length", "fixed-sentence", "bridge", "low-confidence", "rind", "search-tag", "follow-up"}
    for name, cls in TRIGGERS.items():
        assert type(make_trigger(name)) is cls and cls.name == name
    expected = {
        "flare": LowConfidenceTrigger,
        "dragin": RindTrigger,
        "fl-rag": FixedLengthTrigger,
        "fs-rag": FixedSentenceTrigger,
        "wo-rag": NeverTrigger,
        "sr-rag": OnceTrigger,
        "flare-instruct": SearchTagTrigger,
        "self-ask": FollowUpTrigger,
    }
    assert set(TRIGGER_ALIASES) == set(expected)
    for alias, cls in expected.items():
        assert type(make_trigger(alias)) is cls
    rind = make_trigger("dragin", theta=2.5)
    assert isinstance(rind, RindTrigger) and rind.theta == 2.5
    assert make_trigger(rind) is rind


def test_make_trigger_unknown_name_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError) as err:
        make_trigger("sometimes")
    assert isinstance(err.value, ValueError)
    message = str(err.value)
    assert "'sometimes'" in message
    for name in [*TRIGGERS, *TRIGGER_ALIASES]:
        assert name in message
    assert err.value.valid == sorted([*TRIGGERS, *TRIGGER_ALIASES])
