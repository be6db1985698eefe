"""Threshold calibration (active_rag.engine.calibration) and its cache (active_rag.components.thresholds): quantiles of known score
distributions, the cache, and theta="auto" resolution."""

from __future__ import annotations

import pytest

from active_rag.components.profiles import get_profile
from active_rag.components.thresholds import (
    Calibration,
    calibration_key,
    load_calibration,
    resolve_threshold,
    save_calibration,
    threshold_for_rate,
)
from active_rag.components.triggers import LowConfidenceTrigger, RindTrigger


def test_threshold_for_rate_returns_the_right_quantile() -> None:
    scores = [float(i) for i in range(1, 101)]  # 1..100
    # RIND fires above theta: 10% of checks firing -> the 11th largest score, so exactly 91..100 fire
    theta = threshold_for_rate(scores, 0.10, fires_above=True)
    assert theta == 90.0 and sum(s > theta for s in scores) == 10
    # FLARE fires below theta: 25% -> the 26th smallest probability
    probs = [i / 100 for i in range(100)]
    p = threshold_for_rate(probs, 0.25, fires_above=False)
    assert p == pytest.approx(0.25) and sum(x < p for x in probs) == 25
    assert sum(s > threshold_for_rate(scores, 0.0, fires_above=True) for s in scores) == 0
    assert sum(s > threshold_for_rate(scores, 1.0, fires_above=True) for s in scores) == 100
    with pytest.raises(ValueError):
        threshold_for_rate([], 0.5, fires_above=True)


def test_calibrate_on_scripted_scores_hits_the_target_rate(monkeypatch, tmp_path) -> None:
    import active_rag.engine.calibration as cal

    monkeypatch.setenv("ACTIVE_RAG_CACHE", str(tmp_path))
    # 10 questions x 4 checks with scores 0.1 .. 4.0; target 1 retrieval per question -> 25% of checks fire
    per_question = [[(q * 4 + c + 1) / 10 for c in range(4)] for q in range(10)]
    monkeypatch.setattr(cal, "collect_check_scores", lambda rag, questions: per_question)

    class Model:
        name = "scripted-model"

    class Rag:
        model = Model()
        trigger = RindTrigger(theta="auto")
        prompt_mode = "single"

    result = cal.calibrate(Rag(), [f"q{i}" for i in range(10)], target=1.0)
    assert result.fire_fraction == pytest.approx(0.25) and result.checks == 40
    assert result.reachable and result.to_dict()["reachable"] is True
    assert result.theta == pytest.approx(3.0)  # the 11th largest of 0.1..4.0; 3.1..4.0 fire: 10 checks
    entry = load_calibration("scripted-model", Rag.trigger)
    assert entry is not None and entry["theta"] == pytest.approx(3.0)
    resolved = resolve_threshold(RindTrigger(theta="auto"), "scripted-model")
    assert resolved.theta == pytest.approx(3.0) and resolved.threshold_source.startswith("calibrated:")
    # the profile's rate is the default target (DRAGIN Table 3, HotpotQA: 3.505 per question)
    default = cal.calibrate(Rag(), [f"q{i}" for i in range(10)], profile="hotpotqa", save=False)
    assert default.target_retrievals_per_question == pytest.approx(3.505)


def test_auto_theta_without_calibration_falls_back_and_says_so(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ACTIVE_RAG_CACHE", str(tmp_path))
    plain = resolve_threshold(RindTrigger(theta="auto"), "m")
    assert plain.theta == 1.2 and plain.threshold_source.startswith("default")
    profiled = resolve_threshold(RindTrigger(theta="auto"), "m", get_profile("2wikimultihopqa"))
    assert profiled.theta == 0.6 and profiled.threshold_source == "profile:2wikimultihopqa"
    flare = resolve_threshold(LowConfidenceTrigger(theta="auto"), "m")
    assert flare.theta == 0.8
    explicit = RindTrigger(theta=0.3)
    assert resolve_threshold(explicit, "m") is explicit


def test_cache_keeps_other_entries(tmp_path) -> None:
    path = tmp_path / "calibration.json"
    a = Calibration(model="m1", trigger="rind", theta=1.0, target_retrievals_per_question=3.0, fire_fraction=0.5,
                    questions=2, checks=4)
    b = Calibration(model="m2", trigger="low-confidence", theta=0.4, target_retrievals_per_question=1.0,
                    fire_fraction=0.2, questions=2, checks=4)
    save_calibration(a, RindTrigger(), path)
    save_calibration(b, LowConfidenceTrigger(), path)
    assert load_calibration("m1", RindTrigger(), path=path)["theta"] == 1.0
    assert load_calibration("m2", LowConfidenceTrigger(), path=path)["theta"] == 0.4
    assert calibration_key("m", RindTrigger(scale="raw")) == "m|rind:raw|-|single"


def test_a_target_above_the_checks_per_question_is_reported_out_of_reach() -> None:
    short = Calibration(model="m", trigger="rind", theta=0.0, target_retrievals_per_question=3.5, fire_fraction=1.0,
                        questions=30, checks=90)
    assert short.checks_per_question == 3.0 and not short.reachable and short.to_dict()["reachable"] is False
