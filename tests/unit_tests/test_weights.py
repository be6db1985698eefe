"""int8 / int4 weight-only linear layers (issue 24): same tokens and decisions as float32, packed kernels used,
the disk cache reused and invalidated, bad values rejected."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from active_rag import ActiveLM, ActiveRAG, Passage
from active_rag.errors import InvalidOptionError
from active_rag.models.quantized import (
    PACKED_MAX_ROWS,
    Int4Linear,
    Int8Linear,
    PackedLinear,
    model_weight_bytes,
    packed_layers,
)
from active_rag.models.weights import DEFAULT_CPU_WEIGHTS, check_weights, quantize_model, resolve_weights
from tests.conftest import build_tiny_model

QUESTION = "Who is Kasper Schmeichel?"


class QueryRetriever:
    """Passages that depend on the query alone (not on earlier calls), so runs in any order can be compared."""

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return [Passage(id=f"{abs(hash(query)) % 997}-{i}", title=f"T{i}", text=f"Passage {i} about {query[:40]}") for i in range(k)]


def _sharp_model(vocab: int, seed: int = 0) -> nn.Module:
    """A tiny random Llama whose output head is scaled up, so that its next-token distribution has a clear
    winner (a random model's near-uniform logits would let any rounding flip a greedy choice)."""
    model = build_tiny_model(vocab, seed=seed)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


@pytest.fixture(scope="module")
def float_and_packed(tiny_tokenizer):
    base = _sharp_model(len(tiny_tokenizer))
    out = {"float32": ActiveLM(base, tiny_tokenizer, name="tiny")}
    for kind in ("int8", "int4"):
        out[kind] = ActiveLM(quantize_model(copy.deepcopy(base), kind), tiny_tokenizer, name="tiny")
    return out


def _kernel_weight(layer: Int8Linear) -> torch.Tensor:
    """The tensor the layer's decode kernel reads: active-rag's layout, or torch's int8 matrix."""
    return layer.tiles if layer.uses_kernel else layer.qweight


def _tokens(lm: ActiveLM, n: int = 24) -> list[int]:
    return [s.id for s in lm.stream(QUESTION, max_new_tokens=n)]


def test_every_linear_layer_is_packed_the_head_included(float_and_packed) -> None:
    for kind in ("int8", "int4"):
        model = float_and_packed[kind].model
        assert not any(type(m) is nn.Linear for m in model.modules())
        assert isinstance(model.lm_head, PackedLinear) and model.lm_head.kind == kind
        assert float_and_packed[kind].weights == kind
    assert float_and_packed["float32"].weights == "float32"
    # int8 reads about a quarter of float32's linear-weight bytes per token, int4 about an eighth
    dense = model_weight_bytes(float_and_packed["float32"].model)
    assert model_weight_bytes(float_and_packed["int8"].model) < 0.3 * dense
    assert model_weight_bytes(float_and_packed["int4"].model) < 0.2 * dense


def test_int8_model_gives_float32_greedy_tokens(float_and_packed) -> None:
    assert _tokens(float_and_packed["int8"]) == _tokens(float_and_packed["float32"])


@pytest.mark.parametrize("kind,bound", [("int8", 0.05), ("int4", 0.25)])
def test_logits_entropy_and_attention_stay_float32_and_close(float_and_packed, kind: str, bound: float) -> None:
    """Stated bound: over 16 steps fed the same tokens, the largest logit difference is below ``bound`` times
    the float32 logits' spread, and entropies and attention rows are as close (int4's rounding may flip a greedy
    choice of a random model, so int4 is held to this bound; int8 to identical tokens as well)."""
    ref = float_and_packed["float32"].session(float_and_packed["float32"].prompt_ids(QUESTION), capture_attention=True)
    mine = float_and_packed[kind].session(float_and_packed[kind].prompt_ids(QUESTION), capture_attention=True)
    for a in ref.generate(16):
        la, lb = ref._logits_at[len(ref.ids) - 1], mine._next_logits
        assert lb is not None and lb.dtype == torch.float32
        assert (la - lb).abs().max() < bound * (la.max() - la.min())

        def force(ids, logits, token=a.id):
            forced = torch.full_like(logits, float("-inf"))
            forced[token] = 0.0
            return forced

        (b,) = list(mine.generate(1, logits_processor=force))  # teacher-forced: the same token, signals kept
        assert b.id == a.id
        assert b.attention is not None and b.attention.dtype == torch.float32
        assert torch.allclose(a.attention, b.attention, atol=bound)
        assert abs(a.entropy - b.entropy) < 10 * bound
        assert abs(a.logprob - b.logprob) < 10 * bound


@pytest.mark.parametrize("preset", ["flare", "dragin", "fl-rag"])
def test_int8_retrieval_decisions_match_float32(float_and_packed, preset: str) -> None:
    def run(lm: ActiveLM) -> tuple[str, list[tuple[int, str]]]:
        result = ActiveRAG.from_preset(preset, lm, QueryRetriever(), max_new_tokens=40).run(QUESTION)
        return result.answer, [(r.position, r.query) for r in result.retrievals]

    reference = run(float_and_packed["float32"])
    assert reference[1], "the float32 run retrieved nothing: the test would compare nothing"
    assert run(float_and_packed["int8"]) == reference


def test_decode_runs_the_packed_kernel_and_never_dequantises(float_and_packed, monkeypatch) -> None:
    lm = float_and_packed["int8"]
    session = lm.session(lm.prompt_ids(QUESTION), capture_attention=True)  # prefill: the head sees one row

    def no_dequantise(*args, **kwargs):
        raise AssertionError("a decode step dequantised a packed layer")

    for layer in (Int8Linear, Int4Linear):
        monkeypatch.setattr(layer, "dequantize", no_dequantise)
        monkeypatch.setattr(layer, "_dense_weight", no_dequantise)
    calls = {name: layer.packed_calls for name, layer in packed_layers(lm.model)}
    list(session.generate(5))
    assert all(layer.packed_calls >= calls[name] + 5 for name, layer in packed_layers(lm.model))


@pytest.mark.parametrize("dtype,bound", [("float32", 0.02), ("bfloat16", 0.03)])
def test_long_prefill_takes_the_dense_path_and_matches_the_kernel(monkeypatch, dtype: str, bound: float) -> None:
    """Above ``PACKED_MAX_ROWS`` rows every packed layer dequantises for a dense product in the prefill dtype;
    its outputs stay within ``bound`` of the kernel's (float32: summation order and the kernel's bfloat16
    constants; bfloat16: the weights rounded to bfloat16 too). (``ACTIVE_RAG_PREFILL=dense``: without AMX a prefill
    takes the kernel's path by default, test_prefill_path.py.)"""
    monkeypatch.setenv("ACTIVE_RAG_PREFILL", "dense")
    monkeypatch.setenv("ACTIVE_RAG_PREFILL_DTYPE", dtype)
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=True)
    for layer in (Int8Linear.from_linear(linear), Int4Linear.from_linear(linear)):
        x = torch.randn(PACKED_MAX_ROWS + 10, 64)
        dense = layer(x)
        assert layer.dense_calls == 1 and layer.packed_calls == 0
        packed = torch.cat([layer(x[i : i + 1]) for i in range(x.shape[0])])
        assert layer.packed_calls == x.shape[0]
        reference = nn.functional.linear(x, layer.dequantize(), linear.bias)
        scale = reference.abs().max()
        assert (dense - reference).abs().max() < bound * scale
        assert (packed - reference).abs().max() < 0.02 * scale
        # and both are close to the float32 layer (int4 more loosely)
        assert (packed - linear(x)).abs().max() < (0.05 if layer.kind == "int8" else 0.3) * scale


def test_bfloat16_model_with_int8_weights(tiny_tokenizer) -> None:
    model = _sharp_model(len(tiny_tokenizer)).to(torch.bfloat16)
    lm = ActiveLM(quantize_model(model, "int8"), tiny_tokenizer, name="tiny")
    steps = list(lm.stream(QUESTION, max_new_tokens=8))
    assert len(steps) == 8 and all(s.attention is not None and s.attention.dtype == torch.float32 for s in steps)
    assert lm.variant == "tiny[int8,bfloat16,cpu]"


def test_batching_and_prefix_cache_with_packed_weights(float_and_packed) -> None:
    lm = float_and_packed["int8"]
    questions = [QUESTION, "Who is Peter Schmeichel?", "Who is Ed Wood?"]
    rag = ActiveRAG.from_preset("dragin", lm, QueryRetriever(), max_new_tokens=24)
    one_by_one = [rag.run(q).answer for q in questions]
    together = [r.answer for r in rag.run_batch(questions, batch_size=3)]
    assert together == one_by_one
    # a second session over the same prompt starts from the prefix cache and decodes the same tokens
    ids = lm.prompt_ids(QUESTION)
    first = [s.id for s in lm.session(ids).generate(8)]
    second = lm.session(ids)
    assert second.cached_tokens > 0
    assert [s.id for s in second.generate(8)] == first


def test_weights_names_and_devices() -> None:
    assert resolve_weights("auto", "cpu") == DEFAULT_CPU_WEIGHTS
    assert resolve_weights("auto", "cuda") == "float32"
    assert resolve_weights("INT4", "cpu") == "int4"
    with pytest.raises(InvalidOptionError, match="packed CPU kernels"):
        resolve_weights("int8", "cuda")
    with pytest.raises(InvalidOptionError, match="weights must be one of auto, float32, int8, int4"):
        check_weights("int3")


# ------------------------------------------------------------------------------------------------ disk cache


@pytest.fixture
def model_dir(tmp_path: Path, tiny_tokenizer, monkeypatch) -> Path:
    monkeypatch.setenv("ACTIVE_RAG_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "tiny-model"
    _sharp_model(len(tiny_tokenizer)).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


def test_quantised_weights_are_cached_reused_and_invalidated(model_dir: Path, tiny_tokenizer, monkeypatch) -> None:
    first = ActiveLM.load(str(model_dir), weights="int8", device="cpu")
    files = list((model_dir.parent / "cache" / "packed").rglob("packed-int8.safetensors"))
    assert len(files) == 1
    tokens = _tokens(first)

    # the second load reads the file: quantising again would fail here
    import active_rag.models.weights as weights_module

    def fail(*args, **kwargs):
        raise AssertionError("quantised again although the cache matches")

    monkeypatch.setattr(weights_module, "quantize_linear", fail)
    second = ActiveLM.load(str(model_dir), weights="int8", device="cpu")
    assert _tokens(second) == tokens
    for (_, a), (_, b) in zip(packed_layers(first.model), packed_layers(second.model), strict=True):
        assert torch.equal(a.integers(), b.integers()) and torch.equal(a.scales, b.scales)
        # weights read from the file are in aligned memory: torch's int8 kernel faults on misaligned ones
        assert _kernel_weight(b).data_ptr() % 64 == 0
    # a batched step (several rows) through the loaded layers
    batch = [second.session(second.prompt_ids(q)) for q in (QUESTION, "Who is Ed Wood?", "Who is Peter?", "Who?")]
    assert all(len(list(s.generate(3))) == 3 for s in batch)
    monkeypatch.undo()
    monkeypatch.setenv("ACTIVE_RAG_CACHE", str(model_dir.parent / "cache"))

    # a changed model (new weights saved in the folder) is quantised again, and the file replaced
    before = files[0].stat().st_mtime_ns
    _sharp_model(len(tiny_tokenizer), seed=1).save_pretrained(model_dir)
    third = ActiveLM.load(str(model_dir), weights="int8", device="cpu")
    assert files[0].stat().st_mtime_ns != before
    reference = ActiveLM(quantize_model(_sharp_model(len(tiny_tokenizer), seed=1), "int8"), tiny_tokenizer)
    for (_, a), (_, b) in zip(packed_layers(third.model), packed_layers(reference.model), strict=True):
        assert torch.equal(a.integers(), b.integers())


def test_int4_cache_rebuilds_the_kernel_layout(model_dir: Path) -> None:
    first = ActiveLM.load(str(model_dir), weights="int4", device="cpu")
    second = ActiveLM.load(str(model_dir), weights="int4", device="cpu")
    assert _tokens(first) == _tokens(second)
    for (_, a), (_, b) in zip(packed_layers(first.model), packed_layers(second.model), strict=True):
        assert a.state().keys() == b.state().keys() and all(torch.equal(t, b.state()[k]) for k, t in a.state().items())


# ------------------------------------------------------------------------------------------------ CLI and adapters


@pytest.mark.parametrize("command", [
    ["ask", "Who?"],
    ["eval", "--dataset", "hotpotqa", "--limit", "1"],
    ["bench", "--suite", "batch"],
    ["bench", "--suite", "weights"],
    ["calibrate", "--method", "dragin"],
])
def test_bad_weights_value_is_one_line_and_exit_2(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from active_rag.cli.commands import main

    assert main([*command, "--weights", "int9"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "weights must be one of auto, float32, int8, int4, mixed, got 'int9'" in err


def test_adapters_take_weights() -> None:
    from langchain_active_rag import ActiveRAG as LangChainActiveRAG
    from langchain_active_rag import ChatActiveHF
    from llamaindex_active_rag import ActiveHFLLM

    assert ChatActiveHF(model="smollm2", weights="int4").weights == "int4"
    assert ActiveHFLLM(model_name="smollm2", weights="float32").weights == "float32"
    assert LangChainActiveRAG("smollm2", weights="int8").weights == "int8"
    with pytest.raises(ValueError, match="weights must be one of"):
        ChatActiveHF(model="smollm2", weights="int9")
    with pytest.raises(InvalidOptionError):
        ActiveHFLLM(model_name="smollm2", weights="int9")


def test_eval_rows_of_packed_weights_go_to_their_own_folder(tmp_path: Path) -> None:
    from active_rag.evaluation.runner import EvalConfig, eval_output_dir

    config = EvalConfig(dataset="hotpotqa", out_dir=tmp_path, weights="int8", device="cpu")
    assert eval_output_dir(config, "qwen2.5-coder-0.5b") == tmp_path / "hotpotqa" / "qwen2.5-coder-0.5b-int8"
    assert eval_output_dir(config, "qwen2.5-coder-0.5b", "float32") == tmp_path / "hotpotqa" / "qwen2.5-coder-0.5b"


def test_calibrations_are_keyed_by_weights_and_dtype(float_and_packed, fake_retriever, tmp_path: Path, monkeypatch) -> None:
    from active_rag.components.thresholds import Calibration, save_calibration
    from active_rag.components.triggers import LowConfidenceTrigger

    monkeypatch.setenv("ACTIVE_RAG_CACHE", str(tmp_path))
    trigger = LowConfidenceTrigger(theta="auto")
    cal = Calibration(model=float_and_packed["float32"].variant, trigger="low-confidence", theta=0.123,
                      target_retrievals_per_question=1.0, profile=None, prompt_mode="single", questions=1, checks=1,
                      fire_fraction=1.0, score_quantiles={})
    save_calibration(cal, trigger)
    dense = ActiveRAG.from_preset("flare", float_and_packed["float32"], fake_retriever, prompt_mode="single")
    packed = ActiveRAG.from_preset("flare", float_and_packed["int8"], fake_retriever, prompt_mode="single")
    assert dense.trigger.theta == pytest.approx(0.123)
    assert packed.trigger.theta != pytest.approx(0.123)  # a float32 calibration is not an int8 one
    assert "tiny[int8,float32,cpu]" in packed.trigger.threshold_source


# ------------------------------------------------------------------------------------------------ bench


def _row(qid: str, answer: str, f1: float, queries: list[str]) -> dict:
    return {"id": qid, "answer": answer, "prediction": answer, "metrics": {"f1": f1}, "wall_time_s": 1.0,
            "trace": [{"position": i, "query": q, "passage_ids": ["p"]} for i, q in enumerate(queries)]}


def test_weights_bench_agreement_counts_answers_decisions_and_pairs_f1(tmp_path: Path) -> None:
    from active_rag.evaluation.bench_weights import agreement

    base, packed = tmp_path / "m", tmp_path / "m-int8"
    base.mkdir()
    packed.mkdir()
    a = [_row("1", "x", 1.0, ["q"]), _row("2", "y", 0.0, ["q"]), _row("3", "z", 1.0, ["q", "r"])]
    b = [_row("1", "x", 1.0, ["q"]), _row("2", "w", 1.0, ["q"]), _row("3", "z", 1.0, ["q"])]
    (base / "sr-rag.jsonl").write_text("".join(json.dumps(r) + "\n" for r in a))
    (packed / "sr-rag.jsonl").write_text("".join(json.dumps(r) + "\n" for r in b))
    out = agreement(base, packed, ["sr-rag"], ["3", "1", "2"], same_n=2, f1_n=3)["sr-rag"]
    assert out["questions"] == 2 and out["same_answer"] == 2 and out["same_decisions"] == 1  # "3" retrieved twice in float32
    assert out["f1_questions"] == 3 and out["f1_difference"] == pytest.approx(100 / 3)
    assert out["f1_low"] <= out["f1_difference"] <= out["f1_high"]


def test_weights_bench_decode_and_prefill_measure_exact_steps(float_and_packed) -> None:
    from active_rag.evaluation.bench_weights import copy_bandwidth, decode_step_ms, prefill_tokens_per_s

    lm = float_and_packed["int8"]
    prompts = [lm.prompt_ids(QUESTION), lm.prompt_ids("Who is Ed Wood?")]
    assert decode_step_ms(lm, prompts, 5) > 0
    assert prefill_tokens_per_s(lm, prompts[0], 2) > 0
    assert lm.prefix_cache is not None  # restored after the prefill timing
    assert copy_bandwidth(mib=8, repeats=2) > 1e8


def test_decode_step_ms_decodes_on_past_the_end_greedily_as_a_user_session(float_and_packed, monkeypatch) -> None:
    """The bench times the step a user's greedy session runs: no logits processor (which would leave the step's
    one summary for torch's ops over the vocabulary), and an end-of-sequence token decoded on, as llama.cpp's side
    does; ``greedy=True`` ends at it, and the model's own ``eos_token_ids`` are left as they were."""
    from active_rag.decoding.model import DecodingSession
    from active_rag.evaluation.bench_weights import decode_step_ms

    lm = float_and_packed["int8"]
    prompt = lm.prompt_ids(QUESTION)
    first = next(iter(lm.session(list(prompt)).generate(1))).id
    seen: list[dict] = []
    generate = DecodingSession.generate

    def recording(self, max_new_tokens, **kwargs):
        seen.append(kwargs)
        return generate(self, max_new_tokens, **kwargs)

    monkeypatch.setattr(DecodingSession, "generate", recording)
    monkeypatch.setattr(lm, "eos_token_ids", frozenset({first}))  # the first greedy token ends a plain session
    assert decode_step_ms(lm, [prompt, prompt], 4) > 0
    assert seen and all(kwargs.get("logits_processor") is None for kwargs in seen)
    assert lm.eos_token_ids == frozenset({first})
    with pytest.raises(RuntimeError, match="decoded 0 tokens, expected 4"):
        decode_step_ms(lm, [prompt], 4, greedy=True)


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_strided_and_empty_inputs(kind: str) -> None:
    """A transposed (non-contiguous) input reads as its values, not its storage order; no rows give no rows."""
    torch.manual_seed(0)
    linear = nn.Linear(64, 32)
    layer = Int8Linear.from_linear(linear) if kind == "int8" else Int4Linear.from_linear(linear)
    x = torch.randn(64, 5).t()  # [5, 64], column-major
    assert not x.is_contiguous()
    assert torch.equal(layer(x), layer(x.contiguous()))
    assert layer(torch.randn(0, 64)).shape == (0, 32)


def test_misaligned_weights_are_copied_to_aligned_memory() -> None:
    """A weight matrix that starts 8 bytes into a buffer (as safetensors may return it) would fault the int8
    kernel from 4 rows on; the layer keeps an aligned copy."""
    torch.manual_seed(0)
    state = Int8Linear.quantize(torch.randn(48, 64))
    buffer = torch.empty(48 * 64 + 64, dtype=torch.int8)
    start = (64 - buffer.data_ptr() % 64) % 64 + 8
    misaligned = buffer[start : start + 48 * 64].view(48, 64)
    misaligned.copy_(state["qweight"])
    assert misaligned.data_ptr() % 64 == 8
    layer = Int8Linear(misaligned, state["scales"])
    assert _kernel_weight(layer).data_ptr() % 64 == 0
    assert layer(torch.randn(8, 64)).shape == (8, 48)


def test_constrained_decoding_reads_the_vocabulary_of_a_packed_head(float_and_packed) -> None:
    from active_rag.decoding.constrained import vocab_size

    assert vocab_size(float_and_packed["int8"]) == vocab_size(float_and_packed["float32"]) == float_and_packed["float32"].model.lm_head.out_features
