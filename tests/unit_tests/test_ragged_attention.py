"""The padded ragged attention (one kernel call with a key mask, issue 25) gives the per-sequence loop's results: the
same greedy tokens in float32 and the same captured attention rows, with sdpa and with eager attention; ``auto``
keeps the loop where it measured faster (the CPU)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import active_rag.decoding.ragged_attention as ragged
from active_rag import ActiveLM
from active_rag.decoding.decode_scheduler import DecodeScheduler, _Request
from active_rag.decoding.ragged_attention import RaggedBatch, use_padded
from tests.unit_tests.test_model import _shared_conftest as _conftest  # tests/conftest.py, loaded by path


QUESTIONS = [
    "Who is Peter Schmeichel?",
    "Hi",
    "Were Scott Derrickson and Ed Wood of the same nationality? " * 3,
    "Is Kasper Schmeichel a goalkeeper?",
    "Which Danish goalkeeper was voted the IFFHS World's Best Goalkeeper in 1992?",
    "Ed Wood was an American filmmaker.",
    "Follow up: Who is he?",
    "He is the son of former Manchester United and Danish international goalkeeper Peter Schmeichel. " * 2,
    "The answer is yes.",
]


def _decode(lm: ActiveLM, mode: str, steps: int, capture: bool) -> tuple[list[list[int]], list[list[torch.Tensor]], int]:
    """Every question decoded greedily together, ``steps`` batched forwards in ``mode``; the tokens, the captured rows
    and how many layer calls took the padded path."""
    scheduler = lm.scheduler
    assert isinstance(scheduler, DecodeScheduler)
    scheduler.attention = mode
    sessions = [lm.session(lm.prompt_ids(q)) for q in QUESTIONS]
    tokens = [[int(s._next_logits.argmax())] for s in sessions]
    rows: list[list[torch.Tensor]] = [[] for _ in sessions]
    padded = 0
    real = ragged.padded_attention

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
        nonlocal padded
        padded += 1
        return real(*args, **kwargs)

    ragged.padded_attention = counting  # type: ignore[assignment]
    try:
        for _ in range(steps):
            requests = [_Request(s._cache, t[-1], s._fed, capture) for s, t in zip(sessions, tokens)]
            scheduler._run(requests)
            for s, r, t, row in zip(sessions, requests, tokens, rows):
                assert r.error is None and r.logits is not None
                s._fed += 1
                t.append(int(r.logits.argmax()))
                if capture:
                    assert r.row is not None
                    row.append(r.row)
    finally:
        ragged.padded_attention = real  # type: ignore[assignment]
        scheduler.attention = "auto"
    return tokens, rows, padded


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("capture", [False, True], ids=["plain", "capture"])
def test_padded_attention_gives_the_loops_greedy_tokens_and_rows(tiny_tokenizer: Any, attn: str, capture: bool) -> None:
    model = _conftest().build_tiny_model(len(tiny_tokenizer), seed=5, layers=3, attn=attn)
    lm = ActiveLM(model, tiny_tokenizer, name=f"tiny-{attn}", prefix_cache=False)
    lengths = {len(lm.prompt_ids(q)) for q in QUESTIONS}
    assert max(lengths) > 3 * min(lengths)  # really ragged: padding is most of some rows
    loop_tokens, loop_rows, loop_padded = _decode(lm, "loop", 12, capture)
    padded_tokens, padded_rows, padded_calls = _decode(lm, "padded", 12, capture)
    assert loop_padded == 0 and padded_calls == 12 * 3  # every layer of every step took the padded call
    assert padded_tokens == loop_tokens
    for a, b in zip(loop_rows, padded_rows):  # the rows are computed apart, per sequence, on both paths
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, atol=1e-6, rtol=0)


def test_padded_attention_matches_in_bfloat16_within_rounding(tiny_tokenizer: Any) -> None:
    model = _conftest().build_tiny_model(len(tiny_tokenizer), seed=5, layers=3).to(torch.bfloat16)
    lm = ActiveLM(model, tiny_tokenizer, name="tiny-bf16", prefix_cache=False)
    loop_tokens, _, _ = _decode(lm, "loop", 6, False)
    padded_tokens, _, _ = _decode(lm, "padded", 6, False)
    same = sum(a == b for a, b in zip(loop_tokens, padded_tokens))
    assert same >= len(QUESTIONS) - 2  # bfloat16 sums in another order may flip a near tie, rarely


def test_auto_keeps_the_loop_where_it_measured_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    sdpa = type("Layer", (), {"_active_rag_inner": "sdpa"})()
    flash = type("Layer", (), {"_active_rag_inner": "flash_attention_2"})()
    batch = RaggedBatch(caches=[None] * 32, capture=[False] * 32)
    even, ragged_lengths = [100] * 32, [10] * 31 + [1000]
    assert ragged.PADDED_MIN_BATCH.get("cpu") is None and not use_padded(sdpa, batch, even, "cpu")  # type: ignore[arg-type]
    monkeypatch.setitem(ragged.PADDED_MIN_BATCH, "cuda", 8)
    assert use_padded(sdpa, batch, even, "cuda")  # type: ignore[arg-type]
    assert not use_padded(sdpa, batch, ragged_lengths, "cuda")  # type: ignore[arg-type]  # mostly padding
    assert not use_padded(sdpa, RaggedBatch(caches=[None] * 4, capture=[False] * 4), [100] * 4, "cuda")  # type: ignore[arg-type]
    assert not use_padded(flash, batch, even, "cuda")  # type: ignore[arg-type]  # a kernel without this mask form
    assert not use_padded(sdpa, RaggedBatch(caches=[None] * 32, capture=[False] * 32, mode="loop"), even, "cuda")  # type: ignore[arg-type]
    assert use_padded(sdpa, RaggedBatch(caches=[None] * 2, capture=[False] * 2, mode="padded"), [1, 50], "cpu")  # type: ignore[arg-type]


def test_an_unknown_attention_mode_is_refused(tiny_model: Any) -> None:
    with pytest.raises(ValueError, match="attention must be one of auto, loop, padded"):
        DecodeScheduler(tiny_model, attention="flex")


def test_the_bench_compares_both_paths_on_a_tiny_model(tiny_lm: ActiveLM) -> None:
    from active_rag.evaluation.bench_ragged import bench_batch, format_table

    row = bench_batch(tiny_lm, 4, min_tokens=8, max_tokens=40, steps=2, capture=True)
    assert row.same_tokens and row.ms["loop"] > 0 and row.ms["padded"] > 0 and row.auto_path == "loop"
    assert "| 4 | 8-40 |" in format_table([row])
