"""The prefix KV cache (issue 15): a new session starts from the longest token-identical cached prefix,
prefills only the rest, never changes the cached tensors, stays under its memory bound, and changes
nothing a user sees except speed."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from active_rag import ActiveLM, ActiveRAG, Passage
from active_rag.errors import InvalidOptionError
from active_rag.decoding.prefix_cache import PrefixCache, common_prefix_length
from active_rag.components.presets import PRESETS

EXEMPLARS = "Question: Who is he? Answer: He is a director. So the answer is a director.\n" * 6
QUESTIONS = [
    "Who is Peter Schmeichel?",
    "Were Scott Derrickson and Ed Wood of the same nationality?",
    "Which Danish goalkeeper was voted the IFFHS World's Best Goalkeeper in 1992?",
]


class HashRetriever:
    """Deterministic passages from the query text (the same under any thread interleaving)."""

    def retrieve(self, query: str, k: int) -> list[Passage]:
        h = sum(map(ord, query))
        return [Passage(id=f"d{(h + i) % 7}", title=f"T{(h + i) % 7}", text=f"Passage {(h + i) % 7}: {query[:30]}") for i in range(k)]


@pytest.fixture(scope="module")
def model(tiny_model):
    return tiny_model


def lms(model, tokenizer, **kwargs):
    return (
        ActiveLM(model, tokenizer, name="tiny", prefix_cache=True, **kwargs),
        ActiveLM(model, tokenizer, name="tiny", prefix_cache=False, **kwargs),
    )


def trace(result):
    return (
        result.answer,
        [t.id for t in result.tokens],
        [(r.position, r.query, [p.id for p in r.passages]) for r in result.retrievals],
        [(d.fire, d.score) for d in result.decisions],
    )


def test_a_second_question_reuses_the_exemplar_prefix(model, tiny_tokenizer) -> None:
    cached, plain = lms(model, tiny_tokenizer)
    first = cached.prompt_ids(EXEMPLARS + QUESTIONS[0])
    second = cached.prompt_ids(EXEMPLARS + QUESTIONS[1])
    shared = common_prefix_length(first, second)
    assert shared > 50  # the chat header and the exemplars
    s1 = cached.session(first, capture_attention=True)
    assert (s1.cached_tokens, s1.prefilled_tokens) == (0, len(first))
    s2 = cached.session(second, capture_attention=True)
    assert (s2.cached_tokens, s2.prefilled_tokens) == (shared, len(second) - shared)
    # outputs equal those with the cache off: tokens exactly, floats to rounding
    ref = plain.session(second, capture_attention=True)
    assert ref.cached_tokens == 0
    a, b = list(s2.generate(12)), list(ref.generate(12))
    assert [s.id for s in a] == [s.id for s in b]
    assert [s.logprob for s in a] == pytest.approx([s.logprob for s in b], abs=1e-5)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x.attention, y.attention, atol=1e-6, rtol=0)
    torch.testing.assert_close(s2.max_attention, ref.max_attention, atol=1e-6, rtol=0)


def test_a_prefix_that_differs_in_its_last_token_is_not_reused(tiny_lm) -> None:
    cache = PrefixCache(2**30)
    k = torch.arange(5.0).reshape(1, 1, 5, 1)
    cache.insert([1, 2, 3, 4, 5], [(k, k)])
    hit = cache.lookup([1, 2, 3, 4, 9, 9])
    assert hit is not None and hit.length == 4  # up to the differing token, never beyond
    assert cache.lookup([7, 2, 3]) is None
    hit = cache.lookup([1, 2, 3, 4, 5, 6], limit=3)
    assert hit is not None and hit.length == 3


def test_the_session_that_computed_a_prompt_shares_its_kv_with_the_cache(model, tiny_tokenizer) -> None:
    """A prompt's KV is held once: the cache's entry views the buffers of the session that computed it."""
    cached, _ = lms(model, tiny_tokenizer)
    ids = cached.prompt_ids(EXEMPLARS + QUESTIONS[0])
    session = cached.session(ids)
    entry = next(iter(cached.prefix_cache._entries.values()))
    assert len(entry.ids) == len(ids)
    for (k, v), layer in zip(entry.kv, session._cache.layers, strict=True):
        assert k.untyped_storage().data_ptr() == layer.keys.untyped_storage().data_ptr()
        assert v.untyped_storage().data_ptr() == layer.values.untyped_storage().data_ptr()
    before = [(k.clone(), v.clone()) for k, v in entry.kv]
    list(session.generate(12))
    session.crop(len(ids))  # the logits after the prompt are gone: its last token is fed again
    list(session.generate(4))
    for (k0, v0), (k1, v1) in zip(before, entry.kv, strict=True):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)


def test_session_never_changes_the_cached_tensors(model, tiny_tokenizer) -> None:
    cached, _ = lms(model, tiny_tokenizer)
    ids = cached.prompt_ids(EXEMPLARS + QUESTIONS[0])
    cached.session(ids)
    entry = next(iter(cached.prefix_cache._entries.values()))
    before = [(k.clone(), v.clone()) for k, v in entry.kv]
    session = cached.session(ids[:-3] + cached.encode(" Who?"), capture_attention=True)
    assert session.cached_tokens > 0
    list(session.generate(8))
    session.crop(len(session.ids) - 4)
    list(session.generate(4))
    for (k0, v0), (k1, v1) in zip(before, entry.kv, strict=True):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)


def test_eviction_keeps_memory_under_the_bound(model, tiny_tokenizer) -> None:
    lm = ActiveLM(model, tiny_tokenizer, name="tiny")
    ids = lm.prompt_ids(EXEMPLARS + QUESTIONS[0])
    per_token = sum(2 * layer.keys.numel() * 4 for layer in lm.session(ids)._cache.layers) / len(ids)
    bound = int(per_token * len(ids) * 2.5)  # room for about two prompts
    cache = PrefixCache(bound)
    lm.prefix_cache = cache
    for i in range(8):
        lm.session(lm.encode(f"{i} " * 3) + ids)  # prompts that share nothing at the start
        assert cache.nbytes <= bound
    assert cache.evictions >= 5 and 1 <= len(cache) <= 2
    # an entry whose tokens are a prefix of a new one is replaced by it, not kept twice
    cache.clear()
    lm.session(ids[:40])
    lm.session(ids)
    assert len(cache) == 1 and len(next(iter(cache._entries.values())).ids) == len(ids)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_gives_the_same_trace_with_and_without_the_cache(model, tiny_tokenizer, preset) -> None:
    cached, plain = lms(model, tiny_tokenizer)
    kwargs = {"max_new_tokens": 30}
    with_cache = [ActiveRAG.from_preset(preset, cached, HashRetriever(), **kwargs).run(q) for q in QUESTIONS]
    without = [ActiveRAG.from_preset(preset, plain, HashRetriever(), **kwargs).run(q) for q in QUESTIONS]
    for a, b in zip(with_cache, without, strict=True):
        ta, tb = trace(a), trace(b)
        assert ta[:3] == tb[:3]
        assert [f for f, _ in ta[3]] == [f for f, _ in tb[3]]
        assert [s for _, s in ta[3]] == pytest.approx([s for _, s in tb[3]], abs=1e-5)
        assert b.cached_prompt_tokens == 0 and b.prefilled_prompt_tokens > 0
    # later questions and re-prompts read the shared prefix from the cache
    assert with_cache[1].cached_prompt_tokens > 0
    assert with_cache[1].prefilled_prompt_tokens < without[1].prefilled_prompt_tokens
    total = with_cache[1].cached_prompt_tokens + with_cache[1].prefilled_prompt_tokens
    assert total == without[1].prefilled_prompt_tokens  # the same prompts, read differently


def test_the_re_prompt_after_a_retrieval_hits_the_cache(model, tiny_tokenizer) -> None:
    lm = ActiveLM(model, tiny_tokenizer, name="tiny")
    rag = ActiveRAG.from_preset("fl-rag", lm, HashRetriever(), max_new_tokens=40)
    result = rag.run(QUESTIONS[0])  # a cold cache: only re-prompts can hit it
    assert len(result.retrievals) >= 2
    assert result.cached_prompt_tokens > 0
    assert result.to_dict()["prompt_tokens"] == {
        "cached": result.cached_prompt_tokens,
        "prefilled": result.prefilled_prompt_tokens,
        "read": result.cached_prompt_tokens + result.prefilled_prompt_tokens,
    }


def test_threads_sharing_one_model_get_serial_results(model, tiny_tokenizer) -> None:
    cached, plain = lms(model, tiny_tokenizer)
    serial = [trace(ActiveRAG.from_preset("dragin", plain, HashRetriever(), max_new_tokens=30).run(q)) for q in QUESTIONS * 2]
    rag = ActiveRAG.from_preset("dragin", cached, HashRetriever(), max_new_tokens=30)
    barrier = threading.Barrier(len(QUESTIONS) * 2)

    def one(q: str):
        barrier.wait(timeout=30)
        return trace(rag.run(q))

    with ThreadPoolExecutor(max_workers=len(QUESTIONS) * 2) as pool:
        concurrent = list(pool.map(one, QUESTIONS * 2))
    assert [c[:3] for c in concurrent] == [s[:3] for s in serial]


@pytest.mark.parametrize("bad", [-1, float("nan"), "lots", float("inf")])
def test_bad_prefix_cache_mb_is_a_clear_error(model, tiny_tokenizer, bad) -> None:
    with pytest.raises(InvalidOptionError, match="prefix_cache_mb"):
        ActiveLM(model, tiny_tokenizer, prefix_cache_mb=bad)


def test_prefix_cache_can_be_turned_off(model, tiny_tokenizer) -> None:
    assert ActiveLM(model, tiny_tokenizer, prefix_cache=False).prefix_cache is None
    assert ActiveLM(model, tiny_tokenizer, prefix_cache_mb=0).prefix_cache is None
    shared = PrefixCache(2**20)
    assert ActiveLM(model, tiny_tokenizer, prefix_cache=shared).prefix_cache is shared


def test_sessions_opened_together_read_a_shared_prompt_once(model, tiny_tokenizer) -> None:
    """A batch of questions opens its sessions at once: the first prefills the shared prompt, the others
    wait for the model lock and start from its entry (no concurrent misses on the same prefix)."""
    cached, _ = lms(model, tiny_tokenizer)
    ids = cached.prompt_ids(EXEMPLARS + QUESTIONS[2])
    n = 4
    barrier = threading.Barrier(n)

    def open_one(_: int):
        barrier.wait(timeout=30)
        return cached.session(ids)

    with ThreadPoolExecutor(max_workers=n) as pool:
        sessions = list(pool.map(open_one, range(n)))
    assert sorted(s.prefilled_tokens for s in sessions) == [1] * (n - 1) + [len(ids)]
    assert sum(s.cached_tokens for s in sessions) == (n - 1) * (len(ids) - 1)


def test_opening_a_session_with_a_one_token_prefill_while_others_decode_does_not_deadlock(model, tiny_tokenizer) -> None:
    """A session whose cached prefix leaves exactly one token to prefill before its last prompt token prefills
    it under the model lock; it must not wait in the decode scheduler for a batch whose leader needs that lock
    (this deadlocked a batch-8 evaluation)."""
    cached, _ = lms(model, tiny_tokenizer)
    base = cached.prompt_ids(EXEMPLARS + QUESTIONS[0])
    cached.session(base)  # caches base[:-1] and base
    stop = threading.Event()
    decoded: list[int] = []
    prefilled: list[int] = []

    def decode() -> None:
        s = cached.session(cached.prompt_ids(QUESTIONS[1]))
        while not stop.is_set() and len(decoded) < 4000:
            list(s.generate(1))
            decoded.append(1)

    def open_many() -> None:
        for k in range(40):  # each prompt: the cached base, one token to prefill, and the last token
            prefilled.append(cached.session([*base, 5 + k % 7, 9]).prefilled_tokens)

    # daemon threads: a deadlock fails the test instead of hanging the suite
    decoders = [threading.Thread(target=decode, daemon=True) for _ in range(2)]
    opener = threading.Thread(target=open_many, daemon=True)
    for t in (*decoders, opener):
        t.start()
    opener.join(timeout=120)
    stop.set()
    for t in decoders:
        t.join(timeout=60)
    assert not opener.is_alive(), "opening sessions deadlocked with the decode scheduler"
    assert len(prefilled) == 40 and all(p <= 2 for p in prefilled) and decoded


def test_a_cache_shared_across_models_and_dtypes_never_reuses_another_s_kv(model, tiny_tokenizer) -> None:
    """Issue 25: the cache is keyed by the model object, dtype and device as well as the tokens."""
    import copy

    shared = PrefixCache(64 * 2**20)
    ids = ActiveLM(model, tiny_tokenizer, name="tiny", prefix_cache=False).prompt_ids(EXEMPLARS + QUESTIONS[0])
    other_weights = copy.deepcopy(model)
    with torch.no_grad():
        for p in other_weights.parameters():
            p.add_(0.05)
    as_bf16 = copy.deepcopy(model).to(torch.bfloat16)
    first = ActiveLM(model, tiny_tokenizer, name="tiny", prefix_cache=shared)
    first.session(ids)
    for other in (other_weights, as_bf16):  # the same name and tokens, other weights or dtype: no hit
        session = ActiveLM(other, tiny_tokenizer, name="tiny", prefix_cache=shared).session(ids)
        assert session.cached_tokens == 0
        plain = ActiveLM(other, tiny_tokenizer, name="tiny", prefix_cache=False).session(ids)
        assert [s.id for s in session.generate(6)] == [s.id for s in plain.generate(6)]
    # a second wrapper of the same model object shares its prefixes
    again = ActiveLM(model, tiny_tokenizer, name="tiny-again", prefix_cache=shared).session(ids)
    assert again.cached_tokens == len(ids) - 1
    assert len(shared) == 3


def test_the_default_bound_follows_the_device_s_free_memory(monkeypatch: pytest.MonkeyPatch, model, tiny_tokenizer) -> None:
    """On a GPU the prefix cache takes a fifth of the memory free after loading, at most 1024 MiB; on the CPU an
    eighth of the memory available, at most 512 MiB (the most where the machine does not say)."""
    from active_rag.decoding import prefix_cache
    from active_rag.decoding.prefix_cache import CPU_PREFIX_CACHE_MB, DEFAULT_PREFIX_CACHE_MB, default_prefix_cache_mb

    available = {"bytes": 1 * 2**30}
    monkeypatch.setattr(prefix_cache, "available_memory_bytes", lambda: available["bytes"])
    assert default_prefix_cache_mb(torch.device("cpu")) == pytest.approx(128)  # 1 GiB available
    available["bytes"] = 64 * 2**30
    assert default_prefix_cache_mb(torch.device("cpu")) == CPU_PREFIX_CACHE_MB == 512
    available["bytes"] = None
    assert default_prefix_cache_mb(torch.device("cpu")) == CPU_PREFIX_CACHE_MB
    free = {"bytes": 2 * 2**30}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 80 * 2**30))
    assert default_prefix_cache_mb(torch.device("cuda")) == pytest.approx(2048 / 5)
    free["bytes"] = 40 * 2**30
    assert default_prefix_cache_mb(torch.device("cuda")) == DEFAULT_PREFIX_CACHE_MB
    available["bytes"] = 1 * 2**30
    lm = ActiveLM(model, tiny_tokenizer, name="tiny")  # no bound given: the CPU's
    assert lm.prefix_cache is not None and lm.prefix_cache.max_bytes == int(128 * 2**20)


def test_what_prompts_share_is_kept_as_a_stem_that_outlives_the_prompts() -> None:
    """Two prompts after the same instruction share a prefix that neither holds whole: the cache keeps a copy of just
    that prefix (a stem, counted at its own size); a lookup prefers it at an equal match, a longer prompt never
    replaces it, and it stays when the bound evicts the whole prompts."""
    from active_rag.decoding.prefix_cache import STEM_MIN

    def kv(ids):
        t = torch.tensor(ids, dtype=torch.float32).reshape(1, 1, len(ids), 1)
        return [(t, t + 0.5)]

    common = list(range(1, STEM_MIN + 11))
    first, second = common + [900, 901, 902], common + [800, 801]
    per_token = 2 * 4  # keys and values, one float each
    cache = PrefixCache(per_token * (len(first) + len(second) + len(common)))
    cache.insert(first, kv(first))
    assert cache.stats()["stems"] == 0
    cache.insert(second, kv(second))
    assert cache.stats()["stems"] == 1 and len(cache) == 3
    stem = cache._entries[(None, tuple(common))]
    assert stem.stem and stem.nbytes == per_token * len(common)
    k, v = stem.kv[0]
    assert k.flatten().tolist() == [float(i) for i in common] and torch.equal(v, k + 0.5)
    assert k.untyped_storage().nbytes() == 4 * len(common)  # a copy of its own size, not a view of a prompt
    hit = cache.lookup(common + [700])
    assert hit is not None and hit.length == len(common) and hit.kv[0][0].shape[2] == len(common)  # the stem
    cache.insert(common + [700, 701], kv(common + [700, 701]))  # covers the stem: the stem stays
    assert (None, tuple(common)) in cache._entries
    for i in range(3):  # prompts that share only the stem: the whole prompts age out, the stem is read and stays
        ids = common + [600 + i] * 8
        assert cache.lookup(ids).length == len(common)
        cache.insert(ids, kv(ids))
        assert cache.nbytes <= cache.max_bytes
    assert (None, tuple(common)) in cache._entries and cache.stats()["stems"] == 1
    short = PrefixCache(2**20)
    short.insert([1, 2, 3, 9], kv([1, 2, 3, 9]))
    short.insert([1, 2, 3, 8], kv([1, 2, 3, 8]))
    assert short.stats()["stems"] == 0  # three shared tokens: no stem below STEM_MIN


def test_a_session_puts_its_prompt_back_for_the_questions_that_share_it(model, tiny_tokenizer) -> None:
    """``remember_prefix``: after other prompts aged it out, a session's prompt is read from the cache again, and
    what a session on a prompt sharing it generates is what it generates without the cache."""
    cached, plain = lms(model, tiny_tokenizer)
    first = cached.prompt_ids(EXEMPLARS + QUESTIONS[0])
    second = cached.prompt_ids(EXEMPLARS + QUESTIONS[2])
    answer = cached.session(first)
    list(answer.generate(6))
    cached.prefix_cache.clear()  # the batch's other prompts aged it out
    answer.remember_prefix(len(first) + 50)  # beyond what it fed: nothing
    assert len(cached.prefix_cache) == 0
    answer.remember_prefix(len(first))
    asked = cached.session(second)
    assert asked.cached_tokens == common_prefix_length(first, second) > 50
    assert [s.id for s in asked.generate(8)] == [s.id for s in plain.session(second).generate(8)]
    plain.session(first).remember_prefix(len(first))  # no cache: nothing to do
