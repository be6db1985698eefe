"""The graphed decode step's body (active_rag.decoding.graph_step) and its slot pool (active_rag.decoding.slot_cache),
run without recording a graph on the CPU: the same tokens, logits and captured attention rows as the eager step on
tiny random Llama and Qwen2 models; an idle bound sequence untouched; crops, re-prompts, the prefix cache and
sequences longer than a slot behave as before; a slot comes back when its sequence is gone. The recording itself
needs CUDA (``results/bench/gpu/run_checks.py``; ``active-rag doctor`` on a GPU)."""

from __future__ import annotations

import gc
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch import nn

from active_rag import ActiveLM, ActiveRAG
from active_rag.decoding.decode_scheduler import DecodeScheduler, _Request
from active_rag.decoding.graph_step import GraphStep, graph_step, graph_wanted
from active_rag.decoding.slot_cache import SlotLayer
from active_rag.retrieval.bm25 import BM25Index
from tests.conftest import build_tiny_model, build_tokenizer


def _qwen2(vocab: int) -> nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(2)
    config = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=False, attn_implementation="sdpa", eos_token_id=None, bos_token_id=None,
                         pad_token_id=None)
    return Qwen2ForCausalLM(config).eval()


def _model(family: str, vocab: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    model = build_tiny_model(vocab, seed=3, layers=3) if family == "llama" else _qwen2(vocab)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # a clear winner per step: rounding must not decide a tie
    return model.to(dtype)


def _lm(model: nn.Module, tokenizer, *, graph: bool, slots: int = 8, capacity: int = 512) -> ActiveLM:
    lm = ActiveLM(model, tokenizer, name="tiny")
    scheduler = DecodeScheduler(lm.model, graph=False)
    if graph:
        scheduler.graph = GraphStep(lm.model, slots=slots, capacity=capacity, graphs=False)
        scheduler.step_path = "graph"
    lm.scheduler = scheduler
    lm.model_lock = scheduler.lock
    return lm


PROMPTS = ["Who wrote Hamlet? Think step by step.", "Which is older, the Eiffel Tower or Big Ben?",
           "The capital of France is a city on the Seine, and its"]


def _steps(lm: ActiveLM, active: list[list[int]], capture: list[bool]) -> list[list[tuple[torch.Tensor, torch.Tensor | None]]]:
    """Prefill the prompts, then for each entry of ``active`` one batched step of those sessions (greedy); per
    step, each stepping session's (logits, captured row)."""
    assert lm.scheduler is not None
    sessions = [lm.session(lm.tokenizer.encode(t), capture_attention=True) for t in PROMPTS]
    tokens = [int(torch.argmax(s._next_logits)) for s in sessions]
    positions = [s._fed for s in sessions]
    out = []
    for which in active:
        batch = [_Request(sessions[i]._cache, tokens[i], positions[i], capture[i]) for i in which]
        with torch.inference_mode():
            lm.scheduler._forward(batch)
        for i, r in zip(which, batch):
            assert r.error is None and r.logits is not None
            tokens[i], positions[i] = int(r.logits.argmax()), positions[i] + 1
        out.append([(r.logits, r.row) for r in batch])
    return out


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_body_gives_the_eager_steps_logits_and_rows(family: str, dtype: torch.dtype) -> None:
    tokenizer = build_tokenizer()
    model = _model(family, len(tokenizer), dtype)
    # every session steps, then the middle one waits (busy elsewhere) while the others go on, then all again
    schedule = [[0, 1, 2]] * 3 + [[0, 2]] * 3 + [[1]] + [[0, 1, 2]] * 3
    capture = [True, False, True]
    eager = _steps(_lm(model, tokenizer, graph=False), schedule, capture)
    graphed_lm = _lm(model, tokenizer, graph=True)
    graphed = _steps(graphed_lm, schedule, capture)
    assert graphed_lm.scheduler is not None and graphed_lm.scheduler.graph_steps == len(schedule) + len(PROMPTS)  # + each prompt's last token
    tolerance = 1e-4 if dtype == torch.float32 else 0.06
    for step_eager, step_graphed in zip(eager, graphed):
        for (logits_e, row_e), (logits_g, row_g) in zip(step_eager, step_graphed):
            scale = float(logits_e.abs().max())
            assert torch.allclose(logits_g, logits_e, atol=tolerance * scale), float((logits_g - logits_e).abs().max())
            assert int(logits_g.argmax()) == int(logits_e.argmax())
            assert (row_e is None) == (row_g is None)
            if row_e is not None:
                assert row_g is not None and row_g.shape == row_e.shape and row_g.device.type == "cpu"
                assert torch.allclose(row_g, row_e, atol=1e-5 if dtype == torch.float32 else 2e-2)


def test_a_bound_sequence_that_takes_no_step_is_not_written() -> None:
    tokenizer = build_tokenizer()
    lm = _lm(_model("qwen2", len(tokenizer)), tokenizer, graph=True)
    assert lm.scheduler is not None and lm.scheduler.graph is not None
    pool = lm.scheduler.graph.pool
    sessions = [lm.session(lm.tokenizer.encode(t)) for t in PROMPTS]
    for i, s in enumerate(sessions):
        with torch.inference_mode():
            lm.scheduler._forward([_Request(s._cache, int(torch.argmax(s._next_logits)), s._fed, False)])
        s._fed += 1
    slot = pool.binding(sessions[1]._cache).slot
    before = [k[slot].clone() for k in pool.keys]
    for _ in range(3):  # sessions 0 and 2 step; session 1's slot lies inside the batch bucket
        batch = [_Request(s._cache, 5, s._fed, False) for s in (sessions[0], sessions[2])]
        with torch.inference_mode():
            lm.scheduler._forward(batch)
        sessions[0]._fed += 1
        sessions[2]._fed += 1
    assert all(torch.equal(b, k[slot]) for b, k in zip(before, pool.keys))


@pytest.mark.parametrize("preset", ["sr-rag", "flare", "dragin", "fl-rag"])
def test_presets_answer_and_decide_as_with_the_eager_step(preset: str) -> None:
    tokenizer = build_tokenizer()
    model = _model("llama", len(tokenizer))
    index = BM25Index.demo()
    question = "When was the author of the manga I\"s born?"
    results = {}
    for graph in (False, True):
        lm = _lm(model, tokenizer, graph=graph, capacity=2048)
        result = ActiveRAG.from_preset(preset, lm, index, max_new_tokens=32).run(question)
        results[graph] = (result.answer, [(r.position, r.query, [p.id for p in r.passages]) for r in result.retrievals])
        if graph:
            assert lm.scheduler is not None and lm.scheduler.graph_steps > 0
    assert results[True] == results[False]


def test_a_sequence_that_outgrows_its_slot_leaves_it_and_decodes_on_through_the_eager_step() -> None:
    tokenizer = build_tokenizer()
    model = _model("llama", len(tokenizer))
    short, long = tokenizer.encode(PROMPTS[0]), tokenizer.encode(" ".join(PROMPTS) * 3)

    def decode(lm: ActiveLM) -> list[int]:
        session = lm.session(short)
        tokens = [s.id for s in session.generate(4)]
        session.extend(long)  # the re-prompt passes the slot's 40 positions
        return tokens + [s.id for s in session.generate(4)]

    reference = decode(_lm(model, tokenizer, graph=False))
    lm = _lm(model, tokenizer, graph=True, capacity=40)
    assert lm.scheduler is not None and lm.scheduler.graph is not None
    pool = lm.scheduler.graph.pool
    assert len(short) + 4 < 40 < len(short) + len(long)
    assert decode(lm) == reference
    assert pool.binds == 1 and pool.released == 1 and pool.in_use == 0
    assert 0 < lm.scheduler.graph_steps < lm.scheduler.forward_calls


def test_a_slot_comes_back_when_its_cache_is_gone_and_the_prefix_cache_holds_no_slot() -> None:
    tokenizer = build_tokenizer()
    lm = _lm(_model("llama", len(tokenizer)), tokenizer, graph=True, slots=2)
    assert lm.scheduler is not None and lm.scheduler.graph is not None
    pool = lm.scheduler.graph.pool
    for _ in range(3):  # more sessions, one after the other, than slots
        session = lm.session(lm.tokenizer.encode(PROMPTS[0] * 2))
        list(session.generate(4))
        assert pool.in_use == 1 and all(isinstance(layer, SlotLayer) and layer.bound for layer in session._cache.layers)
        session.crop(len(session.ids) - 2)  # a crop and a re-prompt write into the slot in place
        session.extend(lm.tokenizer.encode(" and then"))
        list(session.generate(2))
        assert pool.binding(session._cache) is not None
        del session
        gc.collect()
        assert pool.in_use == 0
    storages = {k.untyped_storage().data_ptr() for k in pool.keys + pool.values}
    entries = getattr(lm.prefix_cache, "_entries", {})
    for entry in entries.values():
        for k, v in entry.kv:
            assert k.untyped_storage().data_ptr() not in storages and v.untyped_storage().data_ptr() not in storages


def test_a_tensor_set_from_outside_moves_the_sequence_out_of_its_slot() -> None:
    tokenizer = build_tokenizer()
    lm = _lm(_model("llama", len(tokenizer)), tokenizer, graph=True)
    assert lm.scheduler is not None and lm.scheduler.graph is not None
    pool = lm.scheduler.graph.pool
    session = lm.session(lm.tokenizer.encode(PROMPTS[1]))
    list(session.generate(3))
    layer = session._cache.layers[0]
    assert isinstance(layer, SlotLayer) and layer.bound
    keys = layer.keys.clone()
    layer.keys = keys  # not a view of the slot
    assert pool.in_use == 0 and not any(getattr(lay, "bound", False) for lay in session._cache.layers)
    assert torch.equal(session._cache.layers[1].keys, session._cache.layers[1].keys)  # still readable
    list(session.generate(2))  # binds again and decodes on
    assert pool.in_use == 1


def test_the_pool_is_sized_from_the_budget_and_only_cuda_records_by_default() -> None:
    tokenizer = build_tokenizer()
    model = _model("llama", len(tokenizer))
    assert not graph_wanted(model)  # a CPU model: the lean step
    from active_rag.decoding.admission import kv_bytes_per_token

    per_position = kv_bytes_per_token(model)
    assert per_position == 2 * 3 * 2 * 16 * 4  # keys and values x layers x kv heads x head dim x float32 bytes
    step = graph_step(model, kv_budget_bytes=3 * 128 * per_position + 1, max_batch=8, capacity=128, graphs=False)
    assert step is not None and step.pool.slots == 3 and step.batch_buckets == [1, 2, 3]
    assert graph_step(model, kv_budget_bytes=10, max_batch=8, capacity=128, graphs=False) is None
    with pytest.raises(ValueError, match="CUDA"):
        GraphStep(model, slots=1, capacity=64, graphs=True)
    scheduler = DecodeScheduler(model, graph=True)
    assert scheduler.step_path == "graph" and scheduler.graph is not None and not scheduler.graph.graphs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_greedy_session_reads_the_steps_token_logprob_and_entropy(dtype: torch.dtype) -> None:
    from active_rag.decoding.graph_step import greedy_summary
    from active_rag.signals import entropy

    tokenizer = build_tokenizer()
    model = _model("qwen2", len(tokenizer), dtype)
    runs = {}
    for graph in (False, True):
        lm = _lm(model, tokenizer, graph=graph)
        session = lm.session(lm.tokenizer.encode(PROMPTS[2]))
        runs[graph] = list(session.generate(8))
        if graph:
            assert session._next_greedy is not None  # the summary came with the step's logits
    assert [s.id for s in runs[True]] == [s.id for s in runs[False]]
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2  # bfloat16: the two steps' logits differ by rounding
    for a, b in zip(runs[True], runs[False]):
        assert abs(a.logprob - b.logprob) < tolerance * max(1.0, abs(b.logprob))
        assert abs(a.entropy - b.entropy) < tolerance * max(1.0, b.entropy)
    logits = torch.randn(3, 50) * 4
    logits[1, 7] = float("-inf")  # a probability of exactly 0 counts 0 to the entropy
    summary = greedy_summary(logits)
    for b in range(3):
        assert int(summary[b, 0]) == int(logits[b].argmax())
        assert float(summary[b, 1]) == pytest.approx(float(torch.log_softmax(logits[b], -1).max()), abs=1e-6)
        assert float(summary[b, 2]) == pytest.approx(entropy(logits[b]), abs=1e-5)


def test_a_non_finite_step_raises_as_the_eager_path_does() -> None:
    from active_rag.errors import NonFiniteLogitsError

    tokenizer = build_tokenizer()
    model = _model("llama", len(tokenizer))
    lm = _lm(model, tokenizer, graph=True)
    session = lm.session(lm.tokenizer.encode(PROMPTS[0]))
    list(session.generate(2))
    with torch.no_grad():
        model.lm_head.weight[3, 0] = float("nan")
    with pytest.raises(NonFiniteLogitsError):
        list(session.generate(4))
