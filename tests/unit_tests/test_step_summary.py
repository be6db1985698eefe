"""A greedy decode step's token, log-probability and entropy in the kernels' op (csrc/summary.cpp,
active_rag.decoding.step_summary): argmax's token, torch's log-probability and entropy within float32 rounding on every
instruction-set path, NaN and infinite logits refused as before, the scheduler hands each session its summary, and
evaluation rows written with it have keys of their own."""

from __future__ import annotations

import math

import pytest
import torch

from active_rag import ActiveLM, kernels
from active_rag.decoding import step_summary
from active_rag.decoding.graph_step import greedy_summary
from active_rag.errors import NonFiniteLogitsError
from tests.unit_tests.test_model import _shared_conftest as _conftest

pytestmark = pytest.mark.skipif(not kernels.loaded(), reason="active-rag's kernels are not built here")


def _op(logits: torch.Tensor, isa: str) -> torch.Tensor:
    return torch.ops.active_rag.greedy_summary(logits, kernels.ISAS[isa])


@pytest.mark.parametrize("isa", sorted(kernels.ISAS, key=kernels.ISAS.get))
@pytest.mark.parametrize("vocab", [1, 7, 255, 256, 1000, 151937])
def test_it_is_argmax_and_torch_s_log_probability_and_entropy(isa: str, vocab: int) -> None:
    if isa not in kernels.supported_isas():
        pytest.skip(f"this CPU does not run {isa}")
    generator = torch.Generator().manual_seed(vocab)
    for scale in (0.01, 1.0, 6.0, 40.0):
        logits = torch.randn(3, vocab, generator=generator) * scale
        if vocab > 10:
            logits[1, : vocab // 3] = -float("inf")  # masked tokens (a logits processor's -inf)
            logits[2, 5] = logits[2, vocab - 1] = logits[2].max() + 1  # a tie: the first index, as argmax
        ours, exact = _op(logits, isa), greedy_summary(logits.double())
        assert torch.equal(ours[:, 0], logits.argmax(dim=-1).float())
        torch.testing.assert_close(ours[:, 1:].double(), exact[:, 1:], atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512-vnni"])
def test_nan_and_infinite_logits_give_a_nan_entropy(isa: str) -> None:
    if isa not in kernels.supported_isas():
        pytest.skip(f"this CPU does not run {isa}")
    for bad, where in ((float("nan"), 700), (float("inf"), 3), (float("nan"), 0)):
        logits = torch.zeros(2, 1000)
        logits[1, where] = bad
        out = _op(logits, isa)
        assert math.isfinite(out[0, 2]) and math.isnan(out[1, 2])
        assert out[1, 0] == logits[1:].argmax(dim=-1).float()[0]  # the first NaN / +inf, as argmax


def test_bad_input_raises() -> None:
    for logits in (torch.zeros(3), torch.zeros(2, 0), torch.zeros(2, 5).bfloat16()):
        with pytest.raises(RuntimeError, match="float32 \\[rows, vocab\\]"):
            torch.ops.active_rag.greedy_summary(logits)


def _generate(lm: ActiveLM, prompt: str, **kwargs) -> list[tuple[int, float, float]]:
    return [(s.id, s.logprob, s.entropy) for s in lm.session(lm.prompt_ids(prompt)).generate(10, **kwargs)]


def test_greedy_sessions_read_it_and_others_the_logits(tiny_tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the scheduler a greedy session gets the op's summary: the same tokens as torch's ops, the
    log-probabilities and entropies within float32 rounding; a sampling session reads the logits; ``=torch`` turns
    it off; NaN logits still raise NonFiniteLogitsError."""
    if not kernels.available():
        pytest.skip("active-rag's kernels do not decode here")
    calls = [0]
    real = step_summary.summaries

    def counting(logits):
        out = real(logits)
        calls[0] += out is not None
        return out

    monkeypatch.setattr("active_rag.decoding.decode_scheduler.summaries", counting)
    model = _conftest().build_tiny_model(len(tiny_tokenizer), seed=6, layers=2)
    lm = ActiveLM(model, tiny_tokenizer, name="tiny-summary", prefix_cache=False)
    ours = _generate(lm, "Who is Peter Schmeichel?")
    assert calls[0] >= 9 and step_summary.describe() == "active-rag's op"
    monkeypatch.setenv(step_summary.VARIABLE, "torch")
    assert step_summary.summaries(torch.zeros(1, 5)) is None and step_summary.describe() == "torch's ops"
    theirs = _generate(lm, "Who is Peter Schmeichel?")
    assert [t for t, _, _ in ours] == [t for t, _, _ in theirs]
    for (_, lp, h), (_, lp2, h2) in zip(ours, theirs, strict=True):
        assert abs(lp - lp2) < 1e-5 and abs(h - h2) < 1e-5
    monkeypatch.delenv(step_summary.VARIABLE)
    sampled = lm.session(lm.prompt_ids("Hi")).generate(3, temperature=0.7, generator=torch.Generator().manual_seed(0))
    assert len(list(sampled)) <= 3
    lm.model.lm_head.weight.data.fill_(float("nan"))
    with pytest.raises(NonFiniteLogitsError):
        _generate(lm, "Who is Peter Schmeichel?")


def test_rows_written_with_it_have_keys_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from active_rag.evaluation import method_engines
    from tests.unit_tests.engine_keys import engine_key

    if not kernels.available():
        pytest.skip("active-rag's kernels do not decode here")
    monkeypatch.setattr(method_engines, "_decodes_with_our_kernel", lambda model: False)
    ours = engine_key()
    monkeypatch.setenv(step_summary.VARIABLE, "torch")
    assert engine_key() != ours
