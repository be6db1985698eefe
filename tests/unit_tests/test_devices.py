"""Tensors made by the engine meet the model's tensors on the model's device (issue 25).

The CPU build has a second device, ``meta``: a tensor made on the CPU (the default) that meets a ``meta`` tensor
fails as it would against a CUDA tensor ("Tensor on device meta is not on the expected device cpu"), so each
test hands the code under test ``meta`` tensors in place of a GPU's."""

from __future__ import annotations

import pytest
import torch

from active_rag import ActiveLM


def test_structured_output_mask_is_built_on_the_logits_device(tiny_lm: ActiveLM) -> None:
    pytest.importorskip("llguidance")
    from active_rag.decoding.constrained import JsonSchemaConstraint

    vocab = len(tiny_lm.tokenizer)
    prompt = tiny_lm.encode("{")
    constraint = JsonSchemaConstraint(tiny_lm, {"type": "object", "properties": {"a": {"type": "integer"}}}, len(prompt))
    masked = constraint(prompt, torch.zeros(vocab, device="meta"))
    assert masked.device.type == "meta" and masked.shape == (vocab,)
    # the same mask on the CPU: some tokens allowed, most masked (the mask is real, not skipped)
    cpu = constraint(prompt, torch.zeros(vocab))
    assert 0 < int(torch.isfinite(cpu).sum()) < vocab


# -- every tensor the packages make names its device ----------------------------------------------------
from typing import Any, Literal  # noqa: E402

from active_rag.models.device_audit import audited  # noqa: E402


class _Retriever:
    def retrieve(self, query: str, k: int) -> list[Any]:
        from active_rag import Passage

        return [Passage(id=f"p{i}", title=f"T{i}", text=f"Peter Schmeichel passage {i}.") for i in range(k)]


@pytest.mark.parametrize("preset", sorted(__import__("active_rag.components.presets", fromlist=["PRESETS"]).PRESETS))
def test_every_preset_makes_its_tensors_on_a_named_device(tiny_lm: ActiveLM, preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from active_rag import ActiveRAG

    rag = ActiveRAG.from_preset(preset, tiny_lm, _Retriever(), max_new_tokens=24)
    if hasattr(rag.trigger, "theta"):
        monkeypatch.setattr(rag.trigger, "theta", 0.0 if preset.startswith("dragin") else 1.0)  # fire: every path runs
    with audited() as audit:
        result = rag.run("Who is Kasper Schmeichel's father?")
    assert audit.unplaced == []
    # the retrieval paths ran (a random model never writes self-ask's "Follow up:" nor "[Search(...)]"; FLARE-instruct's
    # logit bias on "[" still ran at every step)
    assert preset in ("wo-rag", "self-ask", "flare-instruct") or result.retrievals


def test_chat_model_sampling_and_structured_output_make_their_tensors_on_a_named_device(
        tiny_lm: ActiveLM) -> None:
    pytest.importorskip("llguidance")
    from pydantic import BaseModel

    from langchain_active_rag import ChatActiveHF

    class Pick(BaseModel):
        ok: bool
        color: Literal["red", "blue"]

    with audited() as audit:
        sampled = ChatActiveHF(lm=tiny_lm, max_tokens=6, temperature=1.0, seed=3).invoke("hi")
        picked = ChatActiveHF(lm=tiny_lm, max_tokens=80).with_structured_output(Pick).invoke("Pick a color.")
    assert audit.unplaced == []
    assert sampled.content and isinstance(picked, Pick)


def test_bench_runs_make_their_tensors_on_a_named_device(tiny_lm: ActiveLM) -> None:
    from active_rag.evaluation.bench_runs import generate_run, naive_segment_run, naive_token_run

    ids = tiny_lm.prompt_ids("Who is Peter Schmeichel?")
    with audited() as audit:
        seconds = [run(tiny_lm, ids, 6) for run in (generate_run, naive_token_run, naive_segment_run)]
    assert audit.unplaced == []
    assert all(s > 0 for s in seconds)


def test_the_audit_catches_a_tensor_made_without_a_device() -> None:
    """The check itself can fail: the three defects of issue 25, replayed from package code."""
    import active_rag.signals as signals

    real = torch.Generator
    code = compile("def made_on_the_cpu(n):\n    return torch.zeros(n), torch.Generator()\n", signals.__file__, "exec")
    scope: dict[str, Any] = {"torch": torch}
    exec(code, scope)  # a function whose code lives in a package file, as a defect there would
    with audited() as audit:
        scope["made_on_the_cpu"](3)
    assert [u.split(" ")[1] for u in audit.unplaced] == ["zeros", "Generator"]
    assert torch.Generator is real  # restored after the block


# -- numerics ------------------------------------------------------------------------------------------
def test_non_finite_logits_raise_instead_of_reading_as_a_confident_token() -> None:
    from active_rag.errors import NonFiniteLogitsError
    from active_rag.signals import entropy

    assert entropy(torch.tensor([0.0, float("-inf"), 0.0])) == pytest.approx(0.6931, abs=1e-4)  # p = 0 terms: 0
    assert entropy(torch.tensor([5.0, float("-inf"), float("-inf")])) == 0.0
    for bad in (torch.tensor([0.0, float("nan"), 1.0]), torch.tensor([float("inf"), 0.0, 1.0]),
                torch.full((3,), float("-inf"))):
        with pytest.raises(NonFiniteLogitsError, match="bfloat16"):
            entropy(bad)


def test_a_session_whose_model_overflows_stops_with_the_error(tiny_lm: ActiveLM, monkeypatch: pytest.MonkeyPatch) -> None:
    from active_rag import ActiveRAG
    from active_rag.errors import NonFiniteLogitsError

    model = tiny_lm.model
    original = model.forward

    def overflowing(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        out.logits = out.logits.clone().fill_(float("nan"))
        return out

    monkeypatch.setattr(model, "forward", overflowing)
    with pytest.raises(NonFiniteLogitsError, match="non-finite logits"):
        ActiveRAG.from_preset("flare", tiny_lm, _Retriever(), max_new_tokens=8).run("Who is Peter?")


def test_capturing_attention_never_changes_bfloat16_logits(tiny_model: Any, tiny_tokenizer: Any) -> None:
    """The captured layer's output comes from the model's own kernel; the row is computed apart in float32."""
    import copy

    model = copy.deepcopy(tiny_model).to(torch.bfloat16)
    lm = ActiveLM(model, tiny_tokenizer, name="tiny-bf16", prefix_cache=False)
    ids = lm.prompt_ids("Who is Kasper Schmeichel's father?")
    seen, plain = lm.session(ids, capture_attention=True), lm.session(ids, capture_attention=False)
    a, b = list(seen.generate(12)), list(plain.generate(12))
    assert [s.id for s in a] == [s.id for s in b]
    assert [s.logprob for s in a] == [s.logprob for s in b]  # bit for bit: the same kernel read the same inputs
    # the row: float32 softmax of the bfloat16 scores, within bfloat16's rounding of the float32 model's row
    dense = ActiveLM(tiny_model, tiny_tokenizer, name="tiny", prefix_cache=False).session(ids, capture_attention=True)
    ref = list(dense.generate(1))[0].attention
    assert a[0].attention.dtype == torch.float32
    torch.testing.assert_close(a[0].attention, ref, atol=3e-2, rtol=0)
    assert float(a[0].attention.sum()) <= 1.0 + 1e-5


# -- faults ---------------------------------------------------------------------------------------------
class _FaultAtLayer:
    """Raises out of memory in the query projection of layer ``k`` while armed: the layers before ``k`` have
    already appended the step's key/value to each sequence's cache."""

    def __init__(self, model: Any, k: int, error: type[RuntimeError] = torch.OutOfMemoryError) -> None:
        self.armed = False
        self.error = error
        self.handle = model.model.layers[k].self_attn.q_proj.register_forward_hook(self._hook)

    def _hook(self, *args: Any) -> None:
        if self.armed:
            self.armed = False
            raise self.error("injected: a fault at a middle layer")


@pytest.mark.parametrize("batched", [True, False])
def test_a_step_that_fails_mid_model_leaves_the_session_as_before_it(tiny_model: Any, tiny_tokenizer: Any, batched: bool) -> None:
    import threading

    lm = ActiveLM(tiny_model, tiny_tokenizer, name="tiny", prefix_cache=False)
    if not batched:
        lm.scheduler = None  # one sequence, its own forward
    ids = lm.prompt_ids("Who is Kasper Schmeichel's father?")
    clean = [s.id for s in lm.session(ids).generate(10)]
    # batched, an out-of-memory error is retried in halves (tests/unit_tests/test_admission.py): inject another fault
    fault = _FaultAtLayer(tiny_model, k=1, error=RuntimeError if batched else torch.OutOfMemoryError)
    try:
        sessions = [lm.session(ids) for _ in range(2 if batched else 1)]
        for s in sessions:
            assert [t.id for t in s.generate(4)] == clean[:4]
        fault.armed = True
        errors: list[BaseException] = []

        def step(s: Any) -> None:
            try:
                list(s.generate(1))
            except RuntimeError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=step, args=(s,)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors  # the step that failed says so
        for s in sessions:  # every layer holds the same number of positions again, and decoding goes on right
            lengths = {layer.keys.shape[-2] for layer in s._cache.layers}
            assert len(lengths) == 1
            s_ids = list(s.ids)
            rest = [t.id for t in s.generate(10 - (len(s_ids) - len(ids)))]
            assert (s_ids + rest)[len(ids):] == clean
    finally:
        fault.handle.remove()
