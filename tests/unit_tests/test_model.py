"""Unit tests of active_rag.decoding.model: the signals read from the one KV-cached pass (token ids, log-probs,
entropies, captured attention rows) are checked against an independent full forward pass of an eager
copy of the same weights, and against transformers' own greedy ``generate``."""

from __future__ import annotations

import importlib.util
import math
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import PretrainedConfig

from active_rag import ActiveLM, DecodingSession
from active_rag.errors import AttentionCaptureError
from active_rag.decoding.attention import attention_modules as _attention_modules
from active_rag.decoding.model import CAPTURE_IMPLEMENTATION
from active_rag.signals import entropy as entropy_of
from active_rag.signals import max_later_attention
from active_rag.types import TokenStep


def _shared_conftest() -> types.ModuleType:
    """``tests/conftest.py`` loaded by path: ``import conftest`` can name another folder's conftest
    (e.g. ``tests/unit_tests/langchain/conftest.py``) depending on what pytest collected first."""
    name = "_active_rag_tests_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "conftest.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_conftest = _shared_conftest()
CORPUS, build_tiny_model, build_tokenizer = _conftest.CORPUS, _conftest.build_tiny_model, _conftest.build_tokenizer

ATOL_ATTENTION = 1e-5
ATOL_LOGPROB = 1e-4


# -- helpers -------------------------------------------------------------------------------------------
def eager_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A fresh, uninstrumented eager Llama with the same weights."""
    cfg = model.config
    ref = build_tiny_model(cfg.vocab_size, attn="eager", layers=cfg.num_hidden_layers, seed=123)
    ref.load_state_dict(model.state_dict())
    assert ref.config._attn_implementation == "eager"
    return ref


@dataclass
class Reference:
    logits: torch.Tensor  # [seq, vocab]: logits[p - 1] predicts the token at position p
    attention: torch.Tensor  # [seq, seq]: last layer, averaged over heads


def full_forward(model: torch.nn.Module, ids: list[int]) -> Reference:
    ref = eager_copy(model)
    with torch.no_grad():
        out = ref(torch.tensor([ids]), output_attentions=True)
    return Reference(logits=out.logits[0].float(), attention=out.attentions[-1][0].float().mean(0))


@dataclass
class Run:
    lm: ActiveLM
    prompt: list[int]
    steps: list[TokenStep]
    session: DecodingSession
    ref: Reference

    @property
    def ids(self) -> list[int]:
        return [s.id for s in self.steps]


def generate_run(lm: ActiveLM, prompt: list[int], n: int) -> Run:
    session = lm.session(prompt, capture_attention=True)
    steps = list(session.generate(n))
    assert len(steps) == n
    return Run(lm, list(prompt), steps, session, full_forward(lm.model, prompt + [s.id for s in steps]))


class NoAttentionLM(torch.nn.Module):
    """A tiny torch module posing as a causal LM, with no attention modules at all."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.config = PretrainedConfig(vocab_size=vocab_size, num_hidden_layers=1, max_position_embeddings=128)
        self.config._name_or_path = "toy/bag-of-embeddings"
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(vocab_size, 8)
        self.head = torch.nn.Linear(8, vocab_size)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def forward(self, input_ids: torch.Tensor, **kwargs: object) -> types.SimpleNamespace:
        return types.SimpleNamespace(logits=self.head(self.embed(input_ids)))


class ToyAttention(torch.nn.Module):
    """Looks like a transformers attention module (``layer_idx``, ``config``) but never calls the
    AttentionInterface."""

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        self.layer_idx = 0
        self.config = config
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class OwnAttentionLM(NoAttentionLM):
    def __init__(self, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self.attn = ToyAttention(self.config)

    def forward(self, input_ids: torch.Tensor, **kwargs: object) -> types.SimpleNamespace:
        return types.SimpleNamespace(logits=self.head(self.attn(self.embed(input_ids))))


# -- fixtures ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The models are tiny: one intra-op thread is many times faster than several on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def lm3(tiny_tokenizer) -> ActiveLM:
    """A different random Llama: 3 layers, GQA (4 query heads, 2 key/value heads), sdpa."""
    return ActiveLM(build_tiny_model(len(tiny_tokenizer), layers=3, seed=1), tiny_tokenizer, name="tiny-llama-3")


@pytest.fixture(scope="module")
def lm_eager(tiny_tokenizer) -> ActiveLM:
    """A random Llama loaded with eager attention: the other layers must stay eager."""
    return ActiveLM(build_tiny_model(len(tiny_tokenizer), attn="eager", seed=2), tiny_tokenizer, name="tiny-eager")


@pytest.fixture(scope="module")
def runs(tiny_lm, lm3, lm_eager) -> dict[str, Run]:
    long_prompt = lm3.prompt_ids(" ".join(CORPUS * 2))
    assert len(long_prompt) > 300
    return {
        "short": generate_run(tiny_lm, tiny_lm.prompt_ids("Who is Peter Schmeichel?"), 20),
        "long-3-layers": generate_run(lm3, long_prompt, 12),
        "eager-base": generate_run(lm_eager, lm_eager.prompt_ids("Is Ed Wood an American filmmaker?"), 12),
    }


CASES = ["short", "long-3-layers", "eager-base"]


# -- attention, log-probs, entropies -----------------------------------------------------------------
def test_tiny_models_use_grouped_query_attention(tiny_lm, lm3) -> None:
    for lm in (tiny_lm, lm3):
        assert lm.model.config.num_key_value_heads < lm.model.config.num_attention_heads


@pytest.mark.parametrize("case", CASES)
def test_attention_rows_equal_full_eager_forward(runs, case: str) -> None:
    run = runs[case]
    for k, step in enumerate(run.steps):
        pos = len(run.prompt) + k
        assert step.position == pos
        assert step.attention is not None and step.attention.shape == (pos,)
        expected = run.ref.attention[pos, :pos]
        torch.testing.assert_close(step.attention, expected, atol=ATOL_ATTENTION, rtol=0)
        assert float(step.attention.sum()) == pytest.approx(1.0 - float(run.ref.attention[pos, pos]), abs=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_logprobs_and_entropies_match_manual_computation(runs, case: str) -> None:
    run = runs[case]
    for step in run.steps:
        logprobs = torch.log_softmax(run.ref.logits[step.position - 1], dim=-1)
        probs = logprobs.exp()
        assert step.logprob == pytest.approx(float(logprobs[step.id]), abs=ATOL_LOGPROB)
        assert step.prob == pytest.approx(float(probs[step.id]), abs=ATOL_LOGPROB)
        assert step.entropy == pytest.approx(float(-(probs * logprobs).sum()), abs=ATOL_LOGPROB)
        assert step.id == int(logprobs.argmax())  # greedy


@pytest.mark.parametrize("case", CASES)
def test_max_attention_equals_max_later_attention_over_rows(runs, case: str) -> None:
    run = runs[case]
    rows = [s.attention for s in run.steps]
    n = len(run.session.ids)
    assert run.session.max_attention.shape == (n,)
    torch.testing.assert_close(run.session.max_attention, max_later_attention(rows, n), atol=0, rtol=0)
    # and from the reference: a_max(j) = max over generated tokens i > j of A[i, j]
    positions = torch.tensor([s.position for s in run.steps])
    earlier = torch.arange(n)[None, :] < positions[:, None]
    expected = (run.ref.attention[positions] * earlier).max(dim=0).values
    torch.testing.assert_close(run.session.max_attention, expected, atol=ATOL_ATTENTION, rtol=0)


def test_tokens_identical_with_capture_on_off_and_to_hf_greedy_generate(tiny_lm, runs) -> None:
    run = runs["short"]
    off = list(tiny_lm.session(run.prompt, capture_attention=False).generate(20))
    assert [s.id for s in off] == run.ids
    assert all(s.attention is None for s in off)
    for a, b in zip(off, run.steps, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=ATOL_LOGPROB)
        assert a.entropy == pytest.approx(b.entropy, abs=ATOL_LOGPROB)
        assert a.text == b.text and a.position == b.position
    # transformers' greedy search on a fresh, uninstrumented copy of the weights (sdpa everywhere)
    fresh = build_tiny_model(len(tiny_lm.tokenizer), seed=321)
    fresh.load_state_dict(tiny_lm.model.state_dict())
    prompt = torch.tensor([run.prompt])
    out = fresh.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=20, min_new_tokens=20)
    assert out[0, len(run.prompt) :].tolist() == run.ids


def test_every_layer_is_routed_and_only_the_captured_one_records(tiny_lm, lm3, lm_eager) -> None:
    for lm, base in ((tiny_lm, "sdpa"), (lm3, "sdpa"), (lm_eager, "eager")):
        modules = _attention_modules(lm.model)
        assert len(modules) == lm.model.config.num_hidden_layers
        assert lm.captured_layer == modules[-1].layer_idx == len(modules) - 1
        for m in modules:
            # every layer goes through active_rag's function (ragged batching), which runs the model's own kernel
            assert m.config._attn_implementation == CAPTURE_IMPLEMENTATION
            assert m._active_rag_inner == base
            assert m._active_rag_captured is (m is modules[-1])
        assert lm.model.config._attn_implementation == base
        assert lm.supports_attention


def test_attention_layer_argument_and_rewrapping(tiny_tokenizer) -> None:
    model = build_tiny_model(len(tiny_tokenizer), layers=3, seed=5)
    lm = ActiveLM(model, tiny_tokenizer, attention_layer=0)
    captured = [m._active_rag_captured for m in _attention_modules(model)]
    assert captured == [True, False, False] and lm.captured_layer == 0
    # rows come from layer 0 now
    prompt = lm.prompt_ids("Who is Kasper?")
    steps = list(lm.session(prompt, capture_attention=True).generate(4))
    ref = eager_copy(model)
    with torch.no_grad():
        out = ref(torch.tensor([prompt + [s.id for s in steps]]), output_attentions=True)
    first = out.attentions[0][0].float().mean(0)
    for s in steps:
        torch.testing.assert_close(s.attention, first[s.position, : s.position], atol=ATOL_ATTENTION, rtol=0)
    # wrapping the same model again does not install a second capture
    again = ActiveLM(model, tiny_tokenizer, attention_layer=0)
    assert again.captured_layer == 0
    assert [m._active_rag_captured for m in _attention_modules(model)] == captured
    assert {m._active_rag_inner for m in _attention_modules(model)} == {"sdpa"}


# -- crop / extend / stop ------------------------------------------------------------------------------
def test_crop_then_continue_reproduces_the_same_tokens(tiny_lm, runs) -> None:
    run = runs["short"]
    session = tiny_lm.session(run.prompt, capture_attention=True)
    first = list(session.generate(20))
    assert [s.id for s in first] == run.ids
    cut = 7
    session.crop(first[cut].position)
    assert session.ids == run.prompt + run.ids[:cut]
    assert len(session) == len(run.prompt) + cut
    again = list(session.generate(20 - cut))
    assert [s.id for s in again] == run.ids[cut:]
    for a, b in zip(again, first[cut:], strict=True):
        assert a.position == b.position and a.text == b.text
        assert a.logprob == pytest.approx(b.logprob, abs=ATOL_LOGPROB)
        torch.testing.assert_close(a.attention, b.attention, atol=ATOL_ATTENTION, rtol=0)


def test_crop_forgets_the_attention_of_cropped_tokens(tiny_lm, runs) -> None:
    run = runs["short"]
    session = tiny_lm.session(run.prompt, capture_attention=True)
    steps = list(session.generate(12))
    cut = 5
    session.crop(steps[cut].position)
    n = len(session.ids)
    live_rows = [s.attention for s in steps[:cut]]
    assert session.max_attention.shape == (n,)
    torch.testing.assert_close(session.max_attention, max_later_attention(live_rows, n), atol=0, rtol=0)
    # continuing with different tokens: a_max covers exactly the live rows again
    forced = tiny_lm.encode(" goalkeeper")
    session.extend(forced)
    more = list(session.generate(4))
    rows = live_rows + [s.attention for s in more]
    torch.testing.assert_close(session.max_attention, max_later_attention(rows, len(session.ids)), atol=0, rtol=0)


def test_crop_without_capture_and_bounds(tiny_lm, runs) -> None:
    run = runs["short"]
    session = tiny_lm.session(run.prompt)
    steps = list(session.generate(10))
    session.crop(steps[3].position + 1)  # keep the first 4 generated tokens
    assert [s.id for s in session.generate(6)] == run.ids[4:10]
    for bad in (0, len(session.ids) + 1):
        with pytest.raises(ValueError, match="crop length"):
            session.crop(bad)
    session.crop(len(session.ids))  # a no-op
    assert session.ids == run.prompt + run.ids[:10]


def test_extend_then_generate_equals_a_fresh_session(tiny_lm, runs) -> None:
    run = runs["short"]
    session = tiny_lm.session(run.prompt, capture_attention=True)
    head = list(session.generate(5))
    forced = tiny_lm.encode(" So the answer is")
    session.extend(forced)
    assert session.ids == run.prompt + [s.id for s in head] + forced
    tail = list(session.generate(6))
    assert tail[0].position == len(run.prompt) + 5 + len(forced)

    fresh_prompt = run.prompt + [s.id for s in head] + forced
    fresh = list(tiny_lm.session(fresh_prompt, capture_attention=True).generate(6))
    assert [s.id for s in tail] == [s.id for s in fresh]
    ref = full_forward(tiny_lm.model, fresh_prompt + [s.id for s in fresh])
    for a, b in zip(tail, fresh, strict=True):
        assert a.position == b.position
        assert a.logprob == pytest.approx(b.logprob, abs=ATOL_LOGPROB)
        torch.testing.assert_close(a.attention, b.attention, atol=ATOL_ATTENTION, rtol=0)
        torch.testing.assert_close(a.attention, ref.attention[a.position, : a.position], atol=ATOL_ATTENTION, rtol=0)


def test_extend_during_capture_off_session(tiny_lm, runs) -> None:
    run = runs["short"]
    session = tiny_lm.session(run.prompt[:-3])
    session.extend(run.prompt[-3:])
    assert [s.id for s in session.generate(8)] == run.ids[:8]


def test_end_of_sequence_stops_and_is_not_yielded(tiny_model, tiny_tokenizer, runs) -> None:
    run = runs["short"]
    lm = ActiveLM(tiny_model, tiny_tokenizer, name="eos-test")
    assert lm.eos_token_ids == frozenset({tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")})
    lm.eos_token_ids = frozenset({run.ids[3]})
    session = lm.session(run.prompt)
    steps = list(session.generate(20))
    assert [s.id for s in steps] == run.ids[: run.ids.index(run.ids[3])]
    assert session.finished
    assert run.ids[3] not in session.ids[len(run.prompt) :]


def test_stop_condition_and_logits_processor(tiny_lm, runs) -> None:
    run = runs["short"]
    seen: list[int] = []

    def stop(steps: list[TokenStep]) -> bool:
        seen.append(len(steps))
        return len(steps) == 3

    steps = list(tiny_lm.session(run.prompt).generate(20, stop=stop))
    assert [s.id for s in steps] == run.ids[:3] and seen == [1, 2, 3]

    target = tiny_lm.encode(" goalkeeper")[0]
    calls: list[int] = []

    def force(ids, logits: torch.Tensor) -> torch.Tensor:
        calls.append(len(ids))
        out = torch.full_like(logits, -1e9)
        out[target] = 0.0
        return out

    forced = list(tiny_lm.session(run.prompt, capture_attention=True).generate(3, logits_processor=force))
    assert [s.id for s in forced] == [target] * 3
    assert calls == [len(run.prompt), len(run.prompt) + 1, len(run.prompt) + 2]
    # log-prob and entropy come from the raw distribution, not the processed one
    ref = full_forward(tiny_lm.model, run.prompt + [target] * 3)
    for s in forced:
        raw = torch.log_softmax(ref.logits[s.position - 1], dim=-1)
        assert s.logprob == pytest.approx(float(raw[target]), abs=ATOL_LOGPROB)
        assert s.logprob < -0.01
        assert s.entropy == pytest.approx(entropy_of(ref.logits[s.position - 1]), abs=ATOL_LOGPROB)


def test_empty_prompt_is_rejected(tiny_lm) -> None:
    with pytest.raises(ValueError, match="at least one prompt token"):
        tiny_lm.session([])


# -- models whose attention cannot be captured ---------------------------------------------------------
def test_model_without_attention_modules(tiny_tokenizer) -> None:
    lm = ActiveLM(NoAttentionLM(len(tiny_tokenizer)), tiny_tokenizer)
    assert lm.name == "toy/bag-of-embeddings"
    assert lm.supports_attention is False
    assert lm.captured_layer is None
    with pytest.raises(AttentionCaptureError) as err:
        lm.require_attention()
    message = str(err.value)
    assert "toy/bag-of-embeddings" in message and "NoAttentionLM" in message
    assert "flare" in message and "Llama" in message  # the fix: an attention-free method or another model family
    with pytest.raises(AttentionCaptureError, match="toy/bag-of-embeddings"):
        lm.session(lm.prompt_ids("hi"), capture_attention=True)
    # generation without attention still works, and stream() quietly turns capture off
    steps = list(lm.stream("Who is Peter?", max_new_tokens=4))
    assert len(steps) == 4 and all(s.attention is None for s in steps)


def test_attention_module_that_bypasses_the_interface_raises_on_capture(tiny_tokenizer) -> None:
    lm = ActiveLM(OwnAttentionLM(len(tiny_tokenizer)), tiny_tokenizer, name="toy-own-attention")
    assert lm.supports_attention and lm.captured_layer == 0
    session = lm.session(lm.prompt_ids("hi"), capture_attention=True)
    with pytest.raises(AttentionCaptureError, match="toy-own-attention.*AttentionInterface"):
        next(session.generate(2))
    assert [len(s.text) >= 0 for s in lm.session(lm.prompt_ids("hi")).generate(2)] == [True, True]


# -- chat template and text ----------------------------------------------------------------------------
def test_chat_parts_and_prompt_ids_use_the_chat_template(tiny_lm, tiny_tokenizer) -> None:
    user = "Who is Kasper Schmeichel's father?"
    expected = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
    )
    assert expected == f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    before, after = tiny_lm.chat_parts(user)
    assert (before, after) == ("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
    assert tiny_lm.prompt_ids(user) == tiny_tokenizer.encode(expected, add_special_tokens=False)
    assert tiny_lm.decode(tiny_lm.prompt_ids(user), skip_special_tokens=False) == expected


def test_chat_parts_with_system_prompt_and_without_template(tiny_model) -> None:
    tok = build_tokenizer()
    lm = ActiveLM(tiny_model, tok, system_prompt="Be brief.")
    assert lm.chat_parts("Q") == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
    tok.chat_template = None
    plain = ActiveLM(tiny_model, tok, system_prompt="Be brief.")
    assert not plain.has_chat_template
    assert plain.chat_parts("Q") == ("Be brief.\n\n", "\nAnswer:")
    assert plain.prompt_ids("Q") == tok.encode("Be brief.\n\nQ\nAnswer:", add_special_tokens=False)


def test_stream_and_complete(tiny_lm, runs) -> None:
    run = runs["short"]
    streamed = list(tiny_lm.stream("Who is Peter Schmeichel?", max_new_tokens=6))
    assert [s.id for s in streamed] == run.ids[:6]
    assert all(s.attention is not None for s in streamed)
    assert streamed[0].position == len(run.prompt)
    raw = list(tiny_lm.stream("Who is Peter Schmeichel?", max_new_tokens=3, chat=False, capture_attention=False))
    expected = list(tiny_lm.session(tiny_lm.encode("Who is Peter Schmeichel?")).generate(3))
    assert [s.id for s in raw] == [s.id for s in expected]
    from_ids = list(tiny_lm.stream(run.prompt, max_new_tokens=4))
    assert [s.id for s in from_ids] == run.ids[:4]
    assert tiny_lm.complete("Who is Peter Schmeichel?", max_new_tokens=8) == tiny_lm.tokenizer.decode(run.ids[:8])


@pytest.mark.parametrize("case", CASES)
def test_token_texts_of_a_generation_join_to_the_decoded_text(runs, case: str) -> None:
    run = runs[case]
    assert "".join(s.text for s in run.steps) == run.lm.tokenizer.decode(run.ids)


@pytest.mark.parametrize(
    "text",
    ["Peter Schmeichel costs 5€ in Zürich.", "naïve café — 日本語", " Dr. Smith's goalkeeper\n\tis Danish!"],
)
def test_token_text_handles_characters_split_over_byte_tokens(tiny_lm, tiny_tokenizer, text: str) -> None:
    ids = tiny_lm.encode(text)
    pieces = [tiny_lm.token_text(ids[:k], ids[k]) for k in range(len(ids))]
    assert "".join(pieces) == tiny_tokenizer.decode(ids) == text
    assert not any("\ufffd" in p for p in pieces)


def test_token_text_of_a_multibyte_character_goes_to_the_completing_token(tiny_lm) -> None:
    ids = tiny_lm.encode("Zürich")
    assert [tiny_lm.decode([i]) for i in ids[1:3]] == ["\ufffd", "\ufffd"]  # "ü" is two byte tokens here
    pieces = [tiny_lm.token_text(ids[:k], ids[k]) for k in range(len(ids))]
    assert pieces[:3] == ["Z", "", "ü"]


def test_entropy_of_matches_definition() -> None:
    logits = torch.tensor([2.0, 0.5, -1.0, 0.0])
    p = torch.softmax(logits, dim=-1)
    assert entropy_of(logits) == pytest.approx(float(-(p * p.log()).sum()), abs=1e-6)
    assert entropy_of(torch.zeros(10)) == pytest.approx(math.log(10), abs=1e-6)


def test_eager_attention_runs_only_on_captured_one_token_decode_steps(tiny_lm, monkeypatch) -> None:
    import active_rag.decoding.attention as model_module

    real = model_module.eager_function
    calls: list[tuple[int, int]] = []  # (layer, query length) of every eager call

    def spy(module):
        fn = real(module)

        def wrapped(mod, query, *args, **kwargs):
            calls.append((mod.layer_idx, query.shape[2]))
            return fn(mod, query, *args, **kwargs)

        return wrapped

    monkeypatch.setattr(model_module, "eager_function", spy)
    prompt = tiny_lm.prompt_ids("Who is Peter Schmeichel?")
    session = tiny_lm.session(prompt, capture_attention=True)
    assert calls == []  # the prefill keeps sdpa, even in the captured layer
    list(session.generate(3))
    assert calls == [(tiny_lm.captured_layer, 1)] * 3
    calls.clear()
    list(tiny_lm.session(prompt, capture_attention=False).generate(3))
    assert calls == []  # no capture: sdpa everywhere


class MaskedVocabLM(NoAttentionLM):
    """Gives -inf to most of the vocabulary, as a model with a restricted output vocabulary would."""

    def forward(self, input_ids: torch.Tensor, **kwargs: object) -> types.SimpleNamespace:
        logits = self.head(self.embed(input_ids))
        logits[..., 10:] = float("-inf")
        return types.SimpleNamespace(logits=logits)


def test_entropy_and_logprob_with_minus_infinity_logits(tiny_tokenizer) -> None:
    lm = ActiveLM(MaskedVocabLM(len(tiny_tokenizer)), tiny_tokenizer)
    prompt = lm.prompt_ids("hi")
    steps = list(lm.session(prompt).generate(3))
    with torch.no_grad():
        logits = lm.model(torch.tensor([prompt]), logits_to_keep=1).logits[0, -1]
    first = steps[0]
    assert first.id < 10 and math.isfinite(first.entropy) and math.isfinite(first.logprob)
    assert first.entropy == pytest.approx(entropy_of(logits[:10]), abs=1e-5)
    assert first.logprob == pytest.approx(float(torch.log_softmax(logits[:10], -1)[first.id]), abs=1e-5)


def test_commit_releases_rows_and_keeps_a_max_exact_across_crops(tiny_lm) -> None:
    """After commit() the session keeps no rows of accepted tokens; a later crop still rebuilds a_max exactly."""
    from active_rag.signals import max_later_attention

    ids = tiny_lm.prompt_ids("Who is Kasper Schmeichel?")
    s = tiny_lm.session(ids, capture_attention=True)
    first = list(s.generate(6))
    s.commit()
    assert s._rows == {}
    second = list(s.generate(6))
    s.crop(second[3].position)  # drop the last three tokens of the second segment
    rows = [t.attention for t in first + second[:3]]
    expected = max_later_attention(rows, len(s.ids))
    assert torch.allclose(s.max_attention[: len(s.ids)], expected, atol=1e-7)
    with pytest.raises(ValueError, match="committed"):
        s.crop(first[2].position)


def test_token_text_decodes_through_the_backend_only_where_that_is_the_same_text(tiny_lm, tiny_tokenizer) -> None:
    ids = tiny_lm.encode("Peter Schmeichel costs 5€ in Zürich, naïve café — 日本語 <|im_end|>")
    for k in range(len(ids)):
        window = ids[max(0, k - 6): k + 1]
        assert tiny_lm._raw_decode(window) == tiny_tokenizer.decode(window, skip_special_tokens=False)
    wrapped = ActiveLM(tiny_lm.model, tiny_tokenizer, name="tiny", batching=False)
    tiny_tokenizer.clean_up_tokenization_spaces = True  # the wrapper's clean-up would change the text: keep it
    try:
        calls = []
        original = tiny_tokenizer.decode
        tiny_tokenizer.decode = lambda ids, **kw: calls.append(ids) or original(ids, **kw)  # type: ignore[method-assign]
        wrapped.token_text(ids[:3], ids[3])
        assert calls
    finally:
        tiny_tokenizer.clean_up_tokenization_spaces = False
        del tiny_tokenizer.decode
