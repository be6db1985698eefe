"""``active-rag bench`` on the tiny random model: structure of the results, positive ratios, equal lengths,
no retrieval in the overhead runs, the naive references' eager-attention switch is undone. No timing assertions."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from active_rag import ActiveLM
from active_rag.evaluation.bench import (
    BenchConfig,
    _eager_attention,
    generate_run,
    loop_run,
    naive_segment_run,
    naive_token_run,
    run_bench,
)


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_bench_runs_on_tiny_model(tiny_lm: ActiveLM, tmp_path: Path) -> None:
    config = BenchConfig(model="tiny", tokens=[6, 12], prompts=2, repeats=1, out_dir=tmp_path / "bench", naive_prompts=1)
    result = run_bench(config, lm=tiny_lm, progress=False)
    saved = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert (tmp_path / "bench" / "bench.md").read_text().startswith("# active-rag bench")
    assert set(saved) >= {"model", "environment", "prompts", "prompt_tokens", "speed", "memory", "retrieval", "targets"}
    assert len(saved["prompts"]) == 2 and all(n > 0 for n in saved["prompt_tokens"])
    assert [(r["method"], r["tokens"]) for r in saved["speed"]] == [("dragin", 6), ("flare", 6), ("dragin", 12), ("flare", 12)]
    for row in saved["speed"]:
        assert _positive(row["loop_ms_per_token"]) and _positive(row["generate_ms_per_token"])
        assert _positive(row["loop_vs_generate"]) and _positive(row["loop_vs_generate_all_runs"])
        assert row["loop_forward_passes_per_token"] >= 1
        if row["method"] == "dragin":
            assert _positive(row["speedup_vs_naive_token"]) and _positive(row["speedup_vs_naive_segment"])
    # One session per loop run: no retrieval, no reopening.
    assert saved["loop_sessions"] == {"loop-dragin": 1, "loop-flare": 1}
    modes = {r["mode"] for r in saved["memory"]["rows"]}
    assert modes == {"loop-dragin", "loop-flare", "generate", "naive-token", "naive-segment"}
    assert all(r["peak_delta_mib"] is None or r["peak_delta_mib"] >= 0 for r in saved["memory"]["rows"])
    assert set(saved["memory"]["exponents"]) == modes
    ret = saved["retrieval"]
    assert ret["index_passages"] == 300 and 0 <= ret["share"] <= 1 and len(ret["rows"]) == 2
    assert _positive(ret["direct_ms_per_query"]) and ret["direct_queries"] == 30
    assert {"loop_vs_generate_max", "speedup_vs_naive_token_at_12"} <= set(saved["targets"])
    assert result["speed"] == saved["speed"]


def test_runs_produce_the_same_number_of_tokens(tiny_lm: ActiveLM) -> None:
    run = loop_run(tiny_lm, "dragin", "Who is Kasper Schmeichel?", 7)
    ids = run.prompt_ids
    assert run.seconds > 0 and run.sessions == 1 and len(ids) > 5
    assert run.forward_passes >= 7 + 1  # prefill + one per token
    assert generate_run(tiny_lm, ids, 7) > 0
    assert naive_token_run(tiny_lm, ids, 7, segment=3) > 0
    assert naive_segment_run(tiny_lm, ids, 7, segment=3) > 0
    assert loop_run(tiny_lm, "flare", "Who is Kasper Schmeichel?", 9).sessions == 1


def test_eager_switch_is_restored(tiny_lm: ActiveLM) -> None:
    model = tiny_lm.model
    before = model.config._attn_implementation
    wrapped = [m for m in model.modules() if hasattr(m, "_active_rag_inner")]
    inner = [m._active_rag_inner for m in wrapped]
    with _eager_attention(tiny_lm):
        assert model.config._attn_implementation == "eager"
        assert all(m._active_rag_inner == "eager" for m in wrapped)
    assert model.config._attn_implementation == before
    assert [m._active_rag_inner for m in wrapped] == inner
    # The engine still captures attention afterwards.
    steps = list(tiny_lm.stream("Who?", max_new_tokens=2, capture_attention=True))
    assert all(s.attention is not None for s in steps)


def test_bench_config_validation() -> None:
    with pytest.raises(ValueError):
        BenchConfig(tokens=[0])
    with pytest.raises(ValueError):
        BenchConfig(methods=["self-ask"])
