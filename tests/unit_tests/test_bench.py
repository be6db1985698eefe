"""``active-rag bench`` on the tiny random model: structure of the results, every run compared producing the
same n tokens from the same prompt ids (end-of-sequence disabled), ratios that are the stated arithmetic on the
measured seconds (scripted timings), no retrieval in the overhead runs, the naive references' eager-attention
switch is undone. No assertions on real timings."""

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


@pytest.mark.slow
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


def _record_loop_tokens(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The tokens of every ``ActiveRAG.run`` the bench makes, read from the runs themselves."""
    from active_rag.engine import ActiveRAG

    loops: list[list[int]] = []
    real_run = ActiveRAG.run

    def recording_run(self: ActiveRAG, q: str) -> Any:
        result = real_run(self, q)
        loops.append([t.id for t in result.tokens])
        return result

    monkeypatch.setattr(ActiveRAG, "run", recording_run)
    return loops


def test_runs_produce_the_same_number_of_tokens(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run compared generates exactly ``n`` tokens from the same prompt ids: the engine loops (DRAGIN with
    attention capture, FLARE), ``model.generate`` and both naive references, and, all being greedy over the same
    weights, the very same tokens. The tokens are read from the runs themselves, not from their return values."""
    n, question = 7, "Who is Kasper Schmeichel?"
    loops = _record_loop_tokens(monkeypatch)
    generated: list[list[int]] = []
    model_class = type(tiny_lm.model)
    real_generate = model_class.generate

    def recording_generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real_generate(self, *args, **kwargs)
        generated.append((out.sequences if hasattr(out, "sequences") else out)[0].tolist())
        return out

    monkeypatch.setattr(model_class, "generate", recording_generate)
    attended: list[list[int]] = []  # input ids of every output_attentions=True forward (the naive references)

    def hook(module: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        if kwargs.get("output_attentions"):
            attended.append(kwargs["input_ids"][0].tolist())

    handle = tiny_lm.model.register_forward_hook(hook, with_kwargs=True)
    try:
        dragin = loop_run(tiny_lm, "dragin", question, n)
        ids = dragin.prompt_ids
        assert len(ids) > 5 and dragin.sessions == 1
        # one pass for the prompt but its last token, one for that token, one per generated token (fed with capture)
        assert dragin.forward_passes == n + 2
        flare = loop_run(tiny_lm, "flare", question, n)
        assert flare.prompt_ids == ids and flare.sessions == 1
        assert generated == []  # the loops decode themselves
        assert generate_run(tiny_lm, ids, n) > 0
        (full,) = generated
        naive_token_run(tiny_lm, ids, n, segment=3)
        token_seq = attended[-1]  # the last forward covers the prompt and every generated token
        assert len(attended) == n + 1  # one full forward per token, plus one for the last token's row
        attended.clear()
        generated.clear()
        naive_segment_run(tiny_lm, ids, n, segment=3)
        segment_seq = attended[-1]
        assert len(attended) == len(generated) == 3  # segments of 3, 3 and 1 tokens
    finally:
        handle.remove()
    runs = {"loop-dragin": loops[0], "loop-flare": loops[1], "generate": full[len(ids):],
            "naive-token": token_seq[len(ids):], "naive-segment": segment_seq[len(ids):]}
    assert {mode: len(tokens) for mode, tokens in runs.items()} == dict.fromkeys(runs, n)
    assert full[: len(ids)] == token_seq[: len(ids)] == segment_seq[: len(ids)] == ids
    assert all(tokens == runs["generate"] for tokens in runs.values()), runs


def test_runs_produce_n_tokens_even_where_the_model_would_stop(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """End-of-sequence is disabled in the loops: a model whose third greedy token is its end-of-sequence token
    still yields exactly ``n`` tokens in every run (the loops go through that token)."""
    import copy


    n, question = 6, "Who is Kasper Schmeichel?"
    plain = [s.id for s in tiny_lm.session(loop_run(tiny_lm, "dragin", question, 1).prompt_ids).generate(n)]
    stopping = copy.copy(tiny_lm)
    stopping.eos_token_ids = frozenset({plain[2]})
    prompt = loop_run(stopping, "dragin", question, 1).prompt_ids
    assert len(list(stopping.session(prompt).generate(n))) == 2  # a plain session ends there
    loops = _record_loop_tokens(monkeypatch)
    loop_run(stopping, "dragin", question, n)
    loop_run(stopping, "flare", question, n)
    assert loops == [plain, plain]
    assert generate_run(stopping, prompt, n) > 0 and naive_token_run(stopping, prompt, n) > 0
    assert naive_segment_run(stopping, prompt, n) > 0  # each raises unless it produced n tokens


def test_bench_ratios_are_computed_from_the_measured_seconds(tiny_lm: ActiveLM, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """With scripted timings (different per mode, prompt and repeat), every per-token time, ratio, speedup and
    target in the report is the stated arithmetic on the measured seconds: per-token medians, the fastest
    repeat per prompt summed over the same prompts (all repeats for ``_all_runs``), the naive speedups on the
    naive prompts only. The baselines get the loop's prompt ids."""
    import statistics

    import active_rag.evaluation.bench as bench
    from active_rag.evaluation.bench_runs import LoopRun

    speed = {"loop-dragin": 0.012, "loop-flare": 0.009, "generate": 0.010, "naive-token": 0.070, "naive-segment": 0.025}
    slower_repeat = {"loop-dragin": 1.5, "loop-flare": 1.2, "generate": 3.0}
    tokens = [40, 80]  # the warm-up calls (n = 32, 1 and 4) measure nothing that is reported
    config = BenchConfig(model="tiny", tokens=tokens, prompts=2, repeats=2, out_dir=tmp_path, naive_prompts=1,
                         memory=False, retrieval=False)
    questions = bench.bench_questions(2)
    prompt = {q: [i + 1] * (5 + i) for i, q in enumerate(questions)}
    factor = {q: 1.0 + 0.7 * i for i, q in enumerate(questions)}  # the second prompt is slower
    measured: dict[tuple[str, int], dict[str, list[float]]] = {}
    passes: dict[tuple[str, int], list[int]] = {}

    def timed(mode: str, q: str, n: int) -> float:
        runs = measured.setdefault((mode, n), {}).setdefault(q, [])
        t = speed[mode] * n * factor[q] * (slower_repeat.get(mode, 1.0) if runs else 1.0)
        runs.append(t)
        return t

    def question_of(ids: list[int]) -> str:
        return next(q for q, p in prompt.items() if p == list(ids))

    def fake_loop(lm: Any, method: str, q: str, n: int) -> LoopRun:
        if n not in tokens:  # warm-up and prompt ids
            return LoopRun(1.0, prompt[q], 1, n + 2)
        passes.setdefault((f"loop-{method}", n), []).append(n + 2 + questions.index(q))
        return LoopRun(timed(f"loop-{method}", q, n), prompt[q], 1, n + 2 + questions.index(q))

    monkeypatch.setattr(bench, "loop_run", fake_loop)
    monkeypatch.setattr(bench, "generate_run", lambda lm, ids, n: timed("generate", question_of(ids), n) if n in tokens else 1.0)
    monkeypatch.setattr(bench, "naive_token_run", lambda lm, ids, n: timed("naive-token", question_of(ids), n))
    monkeypatch.setattr(bench, "naive_segment_run", lambda lm, ids, n: timed("naive-segment", question_of(ids), n))
    result = run_bench(config, lm=tiny_lm, progress=False)

    def best(mode: str, n: int, qs: list[str]) -> float:
        return sum(min(measured[mode, n][q]) for q in qs)

    def every(mode: str, n: int, qs: list[str]) -> list[float]:
        return [t for q in qs for t in measured[mode, n][q]]

    assert [len(every("generate", n, questions)) for n in tokens] == [4, 4]  # 2 prompts x 2 repeats
    assert [len(every("naive-token", n, questions[:1])) for n in tokens] == [1, 1]  # once, on the first prompt
    assert ("naive-token", 40) in measured and questions[1] not in measured["naive-token", 40]
    rows = {(r["method"], r["tokens"]): r for r in result["speed"]}
    assert list(rows) == [("dragin", 40), ("flare", 40), ("dragin", 80), ("flare", 80)]
    for (method, n), row in rows.items():
        mode = f"loop-{method}"
        assert row["loop_ms_per_token"] == pytest.approx(1000 * statistics.median(t / n for t in every(mode, n, questions)))
        assert row["generate_ms_per_token"] == pytest.approx(1000 * statistics.median(t / n for t in every("generate", n, questions)))
        assert row["loop_vs_generate"] == pytest.approx(best(mode, n, questions) / best("generate", n, questions))
        assert row["loop_vs_generate_all_runs"] == pytest.approx(sum(every(mode, n, questions)) / sum(every("generate", n, questions)))
        assert row["loop_forward_passes_per_token"] == pytest.approx(statistics.median(p / n for p in passes[mode, n]))
        assert row["runs"] == 4
        if method == "dragin":
            for m in ("token", "segment"):
                naive = f"naive-{m}"
                assert row[f"naive_{m}_ms_per_token"] == pytest.approx(1000 * statistics.median(t / n for t in every(naive, n, questions[:1])))
                assert row[f"speedup_vs_naive_{m}"] == pytest.approx(best(naive, n, questions[:1]) / best(mode, n, questions[:1]))
        else:
            assert "speedup_vs_naive_token" not in row
    # the numbers above, worked out by hand for one row: the fastest repeats give 1.2x, all repeats 0.75x
    assert rows["dragin", 80]["loop_vs_generate"] == pytest.approx(1.2)
    assert rows["dragin", 80]["loop_vs_generate_all_runs"] == pytest.approx(0.012 * 2.5 / (0.010 * 4.0))
    assert rows["dragin", 80]["speedup_vs_naive_token"] == pytest.approx(0.070 / 0.012)
    targets = result["targets"]
    assert targets["loop_vs_generate_max"] == {"target": "<= 1.15", "value": pytest.approx(1.2), "met": False}
    assert targets["speedup_vs_naive_token_at_80"] == {"target": ">= 5", "value": pytest.approx(0.070 / 0.012), "met": True}
    assert result["prompt_ids_match"] is True and result["loop_sessions"] == {"loop-dragin": 1, "loop-flare": 1}
    assert result["prompt_tokens"] == [5, 6]


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
