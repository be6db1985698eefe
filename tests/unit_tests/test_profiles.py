"""DRAGIN Table 9 profiles (active_rag.components.profiles) and their use by presets."""

from __future__ import annotations

import pytest

from active_rag.errors import UnknownNameError
from active_rag.components.presets import preset_kwargs
from active_rag.components.profiles import PROFILES, get_profile, profile_for_dataset


@pytest.mark.parametrize(
    ("name", "theta", "top_n", "length"),
    [
        # Table 9, Llama2-13b-chat
        ("2wikimultihopqa", 0.6, 25, 64), ("hotpotqa", 1.2, 35, 100), ("iirc", 1.25, 25, 128), ("strategyqa", 1.0, 25, 100),
        # Llama2-7b-chat
        ("2wikimultihopqa-llama2-7b", 1.0, 25, 64), ("hotpotqa-llama2-7b", 1.3, 35, 100),
        ("iirc-llama2-7b", 1.3, 35, 128), ("strategyqa-llama2-7b", 0.75, 35, 100),
        # Vicuna-13b-v1.5
        ("2wikimultihopqa-vicuna-13b", 1.2, 25, 64), ("hotpotqa-vicuna-13b", 1.2, 35, 100),
        ("iirc-vicuna-13b", 1.3, 35, 128), ("strategyqa-vicuna-13b", 1.5, 25, 100),
    ],
)
def test_profiles_load_the_table_9_values(name: str, theta: float, top_n: int, length: int) -> None:
    p = get_profile(name)
    assert (p.theta, p.top_n, p.generate_length) == (theta, top_n, length)


def test_profile_rates_datasets_and_names() -> None:
    assert len(PROFILES) == 12
    hotpot = profile_for_dataset("hotpotqa")
    assert hotpot is not None and hotpot.llm == "llama2-13b-chat"
    assert hotpot.target_rate("rind") == pytest.approx(3.505) and hotpot.target_rate("low-confidence") == pytest.approx(3.378)
    assert profile_for_dataset("retrievalqa") is None
    with pytest.raises(UnknownNameError, match="hotpotqa"):
        get_profile("hotpot")


def test_a_profile_sets_dragins_segment_query_and_answer_length() -> None:
    kw = preset_kwargs("dragin", "2wikimultihopqa")
    assert kw["trigger"].max_tokens == 64 and kw["query"].top_n == 25 and kw["max_new_tokens"] == 64
    assert kw["trigger"].theta == "auto"  # resolved by the engine: calibration, else the profile's 0.6
    assert "profile" not in preset_kwargs("dragin")
