"""The decode scheduler's lean step (active_rag.decoding.lean_step): the same batched step as ``model(...)`` without
transformers' per-call machinery. Tiny random Llama and Qwen2 models, float32 and bfloat16, dense and packed:
the logits and captured attention rows of a ragged batch equal ``model(...)``'s to the bit (packed projections of one
input sharing a kernel call); a model it does not
know, a sliding window, the environment variable or a forward hook send the step through ``model(...)``."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch import nn

from active_rag import ActiveLM, kernels
from active_rag.decoding import lean_step as lean_module
from active_rag.decoding import step_norms
from active_rag.decoding.attention import RAGGED, RaggedBatch
from active_rag.decoding.lean_step import DECODE_STEP_VARIABLE, lean_step
from active_rag.decoding.ragged_attention import RaggedCache
from active_rag.models.fused_projections import FusedRun
from active_rag.models.weights import quantize_model
from tests.conftest import build_tiny_model


def _qwen2(vocab: int, **overrides) -> nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(2)
    settings = dict(vocab_size=vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=False,
                    attn_implementation="sdpa", eos_token_id=None, bos_token_id=None, pad_token_id=None)
    settings.update(overrides)
    return Qwen2ForCausalLM(Qwen2Config(**settings)).eval()


def _model(family: str, vocab: int, dtype: torch.dtype, weights: str) -> nn.Module:
    model = build_tiny_model(vocab, seed=3, layers=3) if family == "llama" else _qwen2(vocab)
    model = model.to(dtype)
    if weights != "dense":
        quantize_model(model, weights)
    return model


def _prompts(tokenizer) -> list[list[int]]:
    texts = ["Who wrote Hamlet? Think step by step.", "Which is older, the Eiffel Tower or Big Ben?",
             "The capital of France is a city on the Seine, and its"]
    return [tokenizer.encode(t) for t in texts]


def _ragged_steps(lm: ActiveLM, use_lean: bool, steps: int = 6) -> list[tuple[torch.Tensor, list[torch.Tensor | None]]]:
    """Prefill three prompts of different lengths, then run ``steps`` batched steps of all three (greedy), through
    the lean step or ``model(...)``; the logits and the captured rows of every step."""
    scheduler = lm.scheduler
    assert scheduler is not None
    sessions = [lm.session(ids, capture_attention=True) for ids in _prompts(lm.tokenizer)]
    caches = [s._cache for s in sessions]
    tokens = [int(torch.argmax(s._next_logits)) for s in sessions]
    positions = [s._fed for s in sessions]
    out = []
    for _ in range(steps):
        ragged = RaggedBatch(caches=caches, capture=[True, False, True], mode="auto")
        input_ids = torch.tensor([[t] for t in tokens])
        position_ids = torch.tensor([[p] for p in positions])
        token = RAGGED.set(ragged)
        try:
            with torch.inference_mode():
                if use_lean:
                    assert scheduler._lean is not None
                    logits = scheduler._lean(input_ids, position_ids, RaggedCache(ragged)).float()
                else:
                    logits = lm.model(input_ids=input_ids, cache=RaggedCache(ragged), position_ids=position_ids,
                                      use_cache=True, logits_to_keep=1).logits[:, -1].float()
        finally:
            RAGGED.reset(token)
        out.append((logits, list(ragged.rows)))
        tokens = [int(t) for t in logits.argmax(-1)]
        positions = [p + 1 for p in positions]
    return out


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype,weights", [(torch.float32, "dense"), (torch.bfloat16, "dense"), (torch.float32, "int8"),
                                           (torch.float32, "int4")])
def test_a_ragged_step_gives_the_logits_and_rows_of_the_model_s_own_forward(tiny_tokenizer, family, dtype, weights) -> None:
    model = _model(family, len(tiny_tokenizer), dtype, weights)
    lm = ActiveLM(model, tiny_tokenizer, name=f"tiny-{family}", prefix_cache=False)
    assert lm.scheduler is not None and lm.scheduler.step_path == "lean"
    if weights != "dense" and kernels.loaded():  # the projections of one input share a kernel call
        first = model.model.layers[0]
        assert isinstance(first.self_attn.q_proj.__dict__.get("_active_rag_fused_run"), FusedRun)
        assert isinstance(first.mlp.gate_proj.__dict__.get("_active_rag_fused_run"), FusedRun)
    lean, plain = _ragged_steps(lm, True), _ragged_steps(lm, False)
    for (a, rows_a), (b, rows_b) in zip(lean, plain, strict=True):
        assert torch.equal(a, b)
        assert rows_a[1] is None and rows_b[1] is None
        for x, y in zip(rows_a, rows_b, strict=True):
            assert (x is None) == (y is None) and (x is None or torch.equal(x, y))


def test_sessions_decode_the_same_tokens_and_signals_through_either_step(tiny_tokenizer) -> None:
    model = _model("qwen2", len(tiny_tokenizer), torch.float32, "dense")
    lm = ActiveLM(model, tiny_tokenizer, name="tiny-qwen2", prefix_cache=False)
    ids = _prompts(tiny_tokenizer)[0]
    lean = list(lm.session(ids, capture_attention=True).generate(12))
    assert lm.scheduler is not None
    lm.scheduler._lean = None
    plain = list(lm.session(ids, capture_attention=True).generate(12))
    assert [(s.id, s.logprob, s.entropy) for s in lean] == [(s.id, s.logprob, s.entropy) for s in plain]
    assert all(torch.equal(a.attention, b.attention) for a, b in zip(lean, plain, strict=True))


def test_a_forward_hook_sends_the_step_through_the_model(tiny_tokenizer) -> None:
    model = _model("llama", len(tiny_tokenizer), torch.float32, "dense")
    lm = ActiveLM(model, tiny_tokenizer, name="tiny-llama", prefix_cache=False)
    assert lm.scheduler is not None and lm.scheduler._lean is not None and not lm.scheduler._lean.hooked()
    seen: list[int] = []
    handle = model.model.layers[1].mlp.up_proj.register_forward_hook(lambda m, i, o: seen.append(o.shape[0]))
    try:
        assert lm.scheduler._lean.hooked()
        session = lm.session(_prompts(tiny_tokenizer)[1])
        seen.clear()
        list(session.generate(3))
        assert len(seen) >= 2  # the decode steps ran the module, hook and all
    finally:
        handle.remove()
    assert not lm.scheduler._lean.hooked()


def test_families_and_layouts_it_does_not_know_step_through_the_model(tiny_tokenizer, monkeypatch) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    vocab = len(tiny_tokenizer)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=1, n_head=2)).eval()
    assert lean_step(gpt2) is None and "not a family" in lean_module._unsupported(gpt2)
    sliding = _qwen2(vocab, use_sliding_window=True, sliding_window=16, max_window_layers=1)
    assert lean_step(sliding) is None and "every position" in lean_module._unsupported(sliding)
    plain = _qwen2(vocab)
    assert lean_step(plain) is not None
    monkeypatch.setenv(DECODE_STEP_VARIABLE, "transformers")
    assert lean_step(plain) is None
    lm = ActiveLM(plain, tiny_tokenizer, name="tiny-qwen2", prefix_cache=False)
    assert lm.scheduler is not None and lm.scheduler.step_path == "transformers"


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_the_step_rotates_with_fewer_ops_only_where_the_bits_are_the_family_s(tiny_tokenizer, family) -> None:
    """The lean step's rotation (``roll`` and a signed ``sin``, once a step) is used where a check on the model's own
    rotary embedding gives the family function's bits; a family function that rotates otherwise is called as it is."""
    model = _model(family, len(tiny_tokenizer), torch.float32, "dense")
    family_module = __import__(type(model).__module__, fromlist=["apply_rotary_pos_emb"])
    assert isinstance(lean_module._rotary(family_module.apply_rotary_pos_emb, model), lean_module._Rotary)

    def interleaved(q, k, cos, sin, *args, **kwargs):  # pairs (0, 1), (2, 3), ...: not rotate_half's halves
        def turn(x):
            pairs = x.unflatten(-1, (-1, 2))
            return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * c + turn(q) * s, k * c + turn(k) * s

    chosen = lean_module._rotary(interleaved, model)
    assert isinstance(chosen, lean_module._FamilyRotary)
    q, k = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 1, 16)
    cos, sin = torch.randn(1, 1, 16), torch.randn(1, 1, 16)
    assert all(torch.equal(a, b) for a, b in zip(chosen(q, k, chosen.prepare(cos, sin)), interleaved(q, k, cos, sin)))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_the_step_norms_with_one_op_only_where_the_bits_are_the_module_s(family, monkeypatch) -> None:
    monkeypatch.setenv(kernels.DECODE_KERNEL_VARIABLE, "torch")  # torch's rms_norm op (the kernels' op: below)
    norm = _model(family, 32, torch.float32, "dense").model.layers[0].input_layernorm
    x = torch.randn(3, 1, norm.weight.shape[0])
    chosen = step_norms.norm(norm)
    assert chosen != norm.forward and torch.equal(chosen(x), norm(x))
    half = _model(family, 32, torch.bfloat16, "dense").model.layers[0].input_layernorm
    y = x.bfloat16()
    assert torch.equal(step_norms.norm(half)(y), half(y))  # whichever it chose
    layer_norm = nn.LayerNorm(8)
    assert step_norms.norm(layer_norm) == layer_norm.forward
    real = torch.nn.functional.rms_norm
    monkeypatch.setattr(torch.nn.functional, "rms_norm", lambda *a, **k: real(*a, **k) * 1.001)  # other bits
    assert step_norms.norm(norm) == norm.forward


@pytest.mark.skipif(not kernels.available(), reason="active-rag's kernels do not decode here")
@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("width", [64, 896, 1536])
def test_the_kernels_add_and_norm_in_one_op_with_the_module_s_bits(family: str, width: int) -> None:
    """The kernels' ``add_rms_norm`` sums the squares as torch does on this CPU: the module's bits for the residual
    add and the norm, at batch 1 to 33 and any scale, and the op is chosen."""
    norm = _model(family, 32, torch.float32, "dense").model.layers[0].input_layernorm
    norm.weight = nn.Parameter(torch.randn(width), requires_grad=False)
    assert step_norms._kernel_lanes(norm) is not None
    add_norm, alone = step_norms.add_norm(norm), step_norms.norm(norm)
    generator = torch.Generator().manual_seed(width)
    for rows in (1, 2, 8, 33):
        for scale in (1e-3, 0.5, 7.0, 300.0):
            hidden, delta = (torch.randn(rows, 1, width, generator=generator) * scale for _ in range(2))
            total, normed = add_norm(hidden, delta)
            assert torch.equal(total, hidden + delta) and torch.equal(normed, norm(hidden + delta))
            assert torch.equal(alone(hidden), norm(hidden))


def test_the_kernels_norm_op_refuses_what_it_does_not_take() -> None:
    if not kernels.loaded():
        pytest.skip("active-rag's kernels are not built here")
    with pytest.raises(RuntimeError, match="weight"):
        torch.ops.active_rag.rms_norm(torch.randn(2, 8), torch.randn(4), 1e-6, 8)
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.active_rag.rms_norm(torch.randn(2, 8).bfloat16(), torch.randn(8).bfloat16(), 1e-6, 8)
    with pytest.raises(RuntimeError, match="lanes"):
        torch.ops.active_rag.rms_norm(torch.randn(2, 8), torch.randn(8), 1e-6, 3)
    with pytest.raises(RuntimeError, match="shape"):
        torch.ops.active_rag.add_rms_norm(torch.randn(2, 8), torch.randn(1, 8), torch.randn(8), 1e-6, 8)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_the_kernels_rotate_a_layer_s_heads_in_one_op_with_the_step_s_bits(family, monkeypatch) -> None:
    """Where the kernels decode, a float32 step turns the projections into rotated heads with one op (chosen by a
    check at build); its heads are the step's own ops' bits, and without the kernels the step keeps its own ops."""
    model = _model(family, 32, torch.float32, "dense")
    module = __import__(type(model).__module__, fromlist=["apply_rotary_pos_emb"])
    rope = lean_module._rotary(module.apply_rotary_pos_emb, model)
    if not kernels.available():
        assert lean_module._kernel_rope(rope, model) is None
        return
    heads_rope = lean_module._kernel_rope(rope, model)
    assert heads_rope is not None
    attn, config = model.model.layers[0].self_attn, model.config
    dim, heads, kv = attn.head_dim, config.num_attention_heads, config.num_key_value_heads
    wide = torch.randn(5, 1, (heads + 2 * kv) * dim) * 10
    q, k = wide[..., : heads * dim], wide[..., heads * dim : (heads + kv) * dim]
    hidden = torch.zeros(5, 1, config.hidden_size)
    rotation = rope.prepare(*model.model.rotary_emb(hidden, torch.tensor([[0], [1], [90], [1000], [7]])))
    theirs = rope(q.view(5, 1, -1, dim).transpose(1, 2), k.view(5, 1, -1, dim).transpose(1, 2), rotation)
    assert all(torch.equal(a, b) for a, b in zip(heads_rope(q, k, rotation), theirs, strict=True))
    assert lean_module._kernel_rope(lean_module._FamilyRotary(module.apply_rotary_pos_emb), model) is None
    monkeypatch.setenv(kernels.DECODE_KERNEL_VARIABLE, "torch")
    assert lean_module._kernel_rope(rope, model) is None
    with pytest.raises(RuntimeError, match="head_dim"):
        torch.ops.active_rag.rope_heads(torch.randn(1, 1, 10), torch.randn(1, 1, 10), torch.randn(1, 1, 1, 4),
                                        torch.randn(1, 1, 1, 4), 4)
