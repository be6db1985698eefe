"""Every decoder layer of a CPU decode step in one call of the kernels' ``decode_layers`` op
(active_rag.decoding.kernel_layers): tiny random Llama and Qwen2 models with packed int8, int4 and mixed weights give
the lean step's Python loop's logits and caches to the bit over ragged batched steps; a captured row, a stale plan,
a cache it cannot write or the environment variable send the step through the Python loop, with nothing written;
the op refuses a plan or caches that do not fit; a cache layer makes room for the position the op writes."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch import nn

from active_rag import ActiveLM, kernels
from active_rag.decoding.attention import RAGGED, RaggedBatch
from active_rag.decoding.kernel_layers import DECODE_LAYERS_VARIABLE, KernelLayers, kernel_layers
from active_rag.decoding.kv_layer import GrowingLayer
from active_rag.decoding.ragged_attention import RaggedCache
from active_rag.models.weights import quantize_model
from tests.conftest import build_tiny_model

pytestmark = pytest.mark.skipif(not kernels.available(), reason="active-rag's kernels do not decode here")


def _qwen2(vocab: int) -> nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(2)
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=False, attn_implementation="sdpa",
        eos_token_id=None, bos_token_id=None, pad_token_id=None)).eval()


def _lm(tokenizer, family: str, weights: str) -> ActiveLM:
    model = build_tiny_model(len(tokenizer), seed=3, layers=3) if family == "llama" else _qwen2(len(tokenizer))
    quantize_model(model, weights)
    return ActiveLM(model, tokenizer, name=f"tiny-{family}", prefix_cache=False)


def _prompts(tokenizer) -> list[list[int]]:
    texts = ["Who wrote Hamlet? Think step by step.", "Which is older, the Eiffel Tower or Big Ben?",
             "The capital of France is a city on the Seine, and its"]
    return [tokenizer.encode(t) for t in texts]


def _steps(lm: ActiveLM, use_loop: bool, steps: int = 5,
           capture: tuple[bool, ...] = (False, False, False)) -> tuple[list[torch.Tensor], list[list[torch.Tensor]], list]:
    """Three prompts of different lengths prefilled, then ``steps`` batched greedy steps through the lean step, its
    layers in one op or (``use_loop=False``) as its Python loop: each step's logits, every sequence's caches and
    each step's captured rows."""
    scheduler = lm.scheduler
    assert scheduler is not None and scheduler._lean is not None
    sessions = [lm.session(ids) for ids in _prompts(lm.tokenizer)]
    caches = [s._cache for s in sessions]
    tokens = [int(torch.argmax(s._next_logits)) for s in sessions]
    positions = [s._fed for s in sessions]
    run = KernelLayers.run
    logits_seen, rows = [], []
    with pytest.MonkeyPatch.context() as patch:
        if not use_loop:
            patch.setattr(KernelLayers, "run", lambda self, *args: None)
        for _ in range(steps):
            ragged = RaggedBatch(caches=caches, capture=list(capture), mode="auto")
            token = RAGGED.set(ragged)
            try:
                with torch.inference_mode():
                    ids, where = torch.tensor([[t] for t in tokens]), torch.tensor([[p] for p in positions])
                    logits = scheduler._lean(ids, where, RaggedCache(ragged)).float()
            finally:
                RAGGED.reset(token)
            logits_seen.append(logits)
            rows.append(list(ragged.rows))
            tokens = [int(t) for t in logits.argmax(-1)]
            positions = [p + 1 for p in positions]
    assert KernelLayers.run is run
    held = [[t.clone() for layer in c.layers for t in (layer.keys, layer.values)] for c in caches]
    return logits_seen, held, rows


def _count_runs(monkeypatch) -> list[bool]:
    """Patch :meth:`KernelLayers.run` to record whether each call ran the op."""
    seen: list[bool] = []
    run = KernelLayers.run

    def counted(self, *args):
        out = run(self, *args)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(KernelLayers, "run", counted)
    return seen


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("weights", ["int8", "int4", "mixed"])
def test_the_layers_in_one_op_give_the_python_loop_s_logits_and_caches(tiny_tokenizer, family, weights,
                                                                        monkeypatch) -> None:
    lm = _lm(tiny_tokenizer, family, weights)
    seen = _count_runs(monkeypatch)
    one_op = _steps(lm, True)
    assert seen and all(seen)  # every step ran the op
    loop = _steps(lm, False)
    for a, b in zip(one_op[0], loop[0], strict=True):
        assert torch.equal(a, b)
    for a, b in zip(one_op[1], loop[1], strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("isa", ["scalar", "avx2"])
def test_the_op_gives_the_loop_s_bits_on_every_instruction_set_path(tiny_tokenizer, isa, monkeypatch) -> None:
    if isa != "scalar" and not torch.ops.active_rag.isa_supported(kernels.ISAS[isa]):
        pytest.skip(f"this CPU has no {isa}")
    monkeypatch.setenv(kernels.ISA_VARIABLE, isa)  # read when the packed layers are built
    lm = _lm(tiny_tokenizer, "qwen2", "mixed")
    assert {m.isa for m in lm.model.modules() if hasattr(m, "uses_kernel") and m.uses_kernel} == {isa}
    seen = _count_runs(monkeypatch)
    one_op = _steps(lm, True, steps=3)
    assert seen and all(seen)
    loop = _steps(lm, False, steps=3)
    assert all(torch.equal(a, b) for a, b in zip(one_op[0], loop[0], strict=True))


def test_a_bfloat16_model_keeps_the_python_loop(tiny_tokenizer) -> None:
    model = _qwen2(len(tiny_tokenizer)).to(torch.bfloat16)
    quantize_model(model, "int8")
    lm = ActiveLM(model, tiny_tokenizer, name="tiny-qwen2-bf16", prefix_cache=False)
    assert lm.scheduler is not None and lm.scheduler._lean is not None and not lm.scheduler._lean.layers_op
    assert kernel_layers(model) is None  # its norms round to bfloat16 before the weight: not the op's bits
    steps = list(lm.session(_prompts(tiny_tokenizer)[0]).generate(4))
    assert len(steps) == 4


def test_sessions_decode_the_same_tokens_and_signals_either_way(tiny_tokenizer, monkeypatch) -> None:
    lm = _lm(tiny_tokenizer, "qwen2", "mixed")
    ids = _prompts(tiny_tokenizer)[0]
    seen = _count_runs(monkeypatch)
    one_op = list(lm.session(ids).generate(40))  # past the first buffer's room: the caches grow on the way
    assert seen and all(seen)
    monkeypatch.setattr(KernelLayers, "run", lambda self, *args: None)
    loop = list(lm.session(ids).generate(40))
    assert [(s.id, s.logprob, s.entropy) for s in one_op] == [(s.id, s.logprob, s.entropy) for s in loop]


@pytest.mark.parametrize("captured_layer", [2, 1, 0])
def test_a_captured_layer_runs_in_the_loop_and_the_others_in_the_op(tiny_tokenizer, monkeypatch,
                                                                     captured_layer) -> None:
    from active_rag.decoding.attention import attention_modules, install

    lm = _lm(tiny_tokenizer, "llama", "int8")
    modules = attention_modules(lm.model)
    install(modules, modules[captured_layer])
    calls: list[tuple[int, int]] = []
    run = KernelLayers.run

    def recorded(self, hidden, x, rotation, batch, start=0, stop=None):
        calls.append((start, self._layers if stop is None else stop))
        return run(self, hidden, x, rotation, batch, start, stop)

    monkeypatch.setattr(KernelLayers, "run", recorded)
    captured = _steps(lm, True, steps=3, capture=(False, True, False))
    expected = [r for r in ((0, captured_layer), (captured_layer + 1, 3)) if r[0] < r[1]]
    assert calls[-2 * len(expected):] == expected * 2  # (the sessions' own first steps before them ran it too)
    plain = _steps(lm, False, steps=3, capture=(False, True, False))
    assert all(torch.equal(a, b) for a, b in zip(captured[0], plain[0], strict=True))
    for a, b in zip(captured[1], plain[1], strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    for a, b in zip(captured[2], plain[2], strict=True):
        assert a[0] is None and b[0] is None and torch.equal(a[1], b[1])


def test_a_stale_plan_or_a_foreign_cache_takes_the_python_loop(tiny_tokenizer, monkeypatch) -> None:
    lm = _lm(tiny_tokenizer, "llama", "int8")
    seen = _count_runs(monkeypatch)

    # a layer given new tensors (as model.to(...) would): the plan no longer applies, the loop reads them
    before = _steps(lm, True, steps=2)
    assert seen and all(seen)
    seen.clear()
    q_proj = lm.model.model.layers[1].self_attn.q_proj
    before_tiles = q_proj._buffers["tiles"]
    q_proj._buffers["tiles"] = q_proj._buffers["tiles"].clone()
    after = _steps(lm, True, steps=2)
    assert not seen
    assert all(torch.equal(a, b) for a, b in zip(before[0], after[0], strict=True))
    q_proj._buffers["tiles"].zero_()  # the loop reads what the layer holds now
    assert not torch.equal(_steps(lm, True, steps=1)[0][0], before[0][0]) and not seen

    # more rows than a packed layer's decode op takes (read at each step, as the layer's own call reads it)
    q_proj._buffers["tiles"] = before_tiles  # the plan's own tensors again
    rows_run: list[int] = []
    ranges = KernelLayers.ranges

    def recorded(self, hidden, batch):
        out = ranges(self, hidden, batch)
        if out:
            rows_run.append(hidden.shape[0])
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(KernelLayers, "ranges", recorded)
        patch.setattr(type(q_proj), "packed_max_rows", 2)
        _steps(lm, True, steps=1)  # the sessions' own one-row steps, then one of three sequences
        assert rows_run and 3 not in rows_run
        patch.setattr(type(q_proj), "packed_max_rows", 8)
        _steps(lm, True, steps=1)
        assert 3 in rows_run

    # a cache layer that is not a growing buffer: nothing is written, the loop runs
    lm = _lm(tiny_tokenizer, "llama", "int8")
    seen = _count_runs(monkeypatch)
    session = lm.session(_prompts(tiny_tokenizer)[0])
    seen.clear()
    from transformers.cache_utils import DynamicLayer

    layer = session._cache.layers[2]
    plain_layer = DynamicLayer()
    plain_layer.lazy_initialization(layer.keys, layer.values)
    plain_layer.keys, plain_layer.values = layer.keys.clone(), layer.values.clone()
    session._cache.layers[2] = plain_layer
    fed = session._fed
    steps = list(session.generate(3))
    assert len(steps) == 3 and seen and not any(seen)
    assert session._fed > fed and [c.keys.shape[-2] for c in session._cache.layers] == [session._fed] * 3


def test_the_environment_variable_keeps_the_python_loop(tiny_tokenizer, monkeypatch) -> None:
    lm = _lm(tiny_tokenizer, "qwen2", "int4")
    assert kernel_layers(lm.model) is not None
    monkeypatch.setenv(DECODE_LAYERS_VARIABLE, "python")
    assert kernel_layers(lm.model) is None


def test_models_with_parts_the_op_does_not_run_keep_the_python_loop(tiny_tokenizer) -> None:
    dense = build_tiny_model(len(tiny_tokenizer), seed=3, layers=2)
    ActiveLM(dense, tiny_tokenizer, name="tiny-dense", prefix_cache=False)  # wires the attention
    assert kernel_layers(dense) is None  # float32 projections
    lm = _lm(tiny_tokenizer, "qwen2", "int8")
    lm.model.model.layers[0].mlp.act_fn = nn.GELU()
    assert kernel_layers(lm.model) is None


def test_a_failed_op_leaves_every_cache_as_it_was(tiny_tokenizer, monkeypatch) -> None:
    lm = _lm(tiny_tokenizer, "qwen2", "int8")
    ids = _prompts(tiny_tokenizer)[1]
    clean = [(s.id, s.logprob) for s in lm.session(ids).generate(6)]
    session = lm.session(ids)
    list(session.generate(2))
    lengths = [c.keys.shape[-2] for c in session._cache.layers]

    def failing(self, hidden, x, rotation, batch, start=0, stop=None):
        assert self._slots(batch.caches, 0, self._layers) is not None  # every layer given room, then a fault
        raise RuntimeError("injected fault")

    with monkeypatch.context() as patch:
        patch.setattr(KernelLayers, "run", failing)
        with pytest.raises(RuntimeError, match="injected fault"):
            list(session.generate(1))
    assert [c.keys.shape[-2] for c in session._cache.layers] == lengths  # the scheduler rolled every layer back
    assert [(s.id, s.logprob) for s in session.generate(4)] == clean[2:]


def test_the_op_refuses_a_plan_or_caches_that_do_not_fit() -> None:
    op = torch.ops.active_rag.decode_layers.default
    hidden = torch.zeros(1, 1, 8)
    rotation = torch.ones(1, 1, 1, 4), torch.zeros(1, 1, 1, 4)
    with pytest.raises(RuntimeError, match="one entry for each layer and sequence"):
        op(hidden, hidden, *rotation, [], [1], [], [], [], [])
    with pytest.raises(RuntimeError, match="fewer integers"):
        op(hidden, hidden, *rotation, [], [1], [], [torch.zeros(1)], [torch.zeros(1)], [0])
    with pytest.raises(RuntimeError, match="more than its layers read"):
        op(hidden, hidden, *rotation, [], [0, 5], [], [], [], [])
    with pytest.raises(RuntimeError, match="float32 CPU tensors"):
        op(hidden.double(), hidden, *rotation, [], [0], [], [], [], [])


def test_a_growing_layer_makes_room_for_the_position_the_op_writes() -> None:
    layer = GrowingLayer()
    assert layer.step_slot() is None  # nothing cached yet: nothing changed
    keys, values = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    layer.update(keys, values)
    kb, vb, position = layer.step_slot()
    assert position == 5 and layer.keys.shape[-2] == 6 and layer.keys.data_ptr() == kb.data_ptr()
    assert torch.equal(layer.keys[:, :, :5], keys) and torch.equal(layer.values[:, :, :5], values)
    kb[:, :, 5], vb[:, :, 5] = 1.0, 2.0  # what the op writes
    # step after step, past the buffer's room: a larger buffer holding every position written
    capacity = kb.shape[2]
    for expected in range(6, capacity + 3):
        k_buffer, v_buffer, position = layer.step_slot()
        assert position == expected and layer.keys.shape[-2] == expected + 1
        k_buffer[:, :, position], v_buffer[:, :, position] = float(position), -float(position)
    assert layer._key_buffer.data_ptr() != kb.data_ptr() and layer._key_buffer.shape[2] > capacity
    assert torch.equal(layer.keys[:, :, :5], keys) and torch.equal(layer.values[:, :, 5], torch.full((1, 2, 4), 2.0))
    assert all(float(layer.keys[0, 1, p, 3]) == p for p in range(6, capacity + 3))
    layer.keys, layer.values = layer.keys[:, :, :6], layer.values[:, :, :6]  # a roll-back: written again from 6
    assert layer.step_slot()[2] == 6
    # shared with a prefix cache: the next position goes to a buffer of the layer's own
    frozen = layer.share(6)
    assert frozen is not None
    kb1 = layer._key_buffer
    layer.keys, layer.values = layer.keys[:, :, :4], layer.values[:, :, :4]  # a crop into the shared positions
    kb2, _, position = layer.step_slot()
    assert position == 4 and kb2.data_ptr() != kb1.data_ptr() and torch.equal(frozen[0][:, :, :4], layer.keys[:, :, :4])
    # tensors set from outside are copied into a new buffer, never written
    outside_k, outside_v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    layer.keys, layer.values = outside_k, outside_v
    kb3, _, position = layer.step_slot()
    assert position == 3 and kb3.data_ptr() != outside_k.data_ptr() and torch.equal(layer.keys[:, :, :3], outside_k)
