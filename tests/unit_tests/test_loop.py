"""The generation loop, preset by preset, driven by a scripted word-level model so that every token,
probability, entropy and attention row is known: retrieval counts, positions, truncation points, tag
removal, regeneration, budgets, errors and streaming order. The running max of later attention that RIND
reads (DRAGIN Eq. 3) is checked on a real tiny Llama against full attention matrices."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pytest
import torch

from active_rag import (
    ActiveLM,
    ActiveRAG,
    ActiveRAGResult,
    ContextOverflowError,
    EmptyQuestionError,
    Passage,
    Retrieval,
    RetrieverError,
    RouteDecision,
    RunSettings,
    TokenEvent,
    TokenStep,
    TriggerDecision,
    UnknownNameError,
)

ASSISTANT = "<assistant>"


@dataclass
class Word:
    text: str
    prob: float = 0.95
    entropy: float = 0.1


Script = Callable[[str], list[Word]]
"""prompt text -> the whole answer the model would write for that prompt."""


class ScriptedSession:
    def __init__(self, lm: ScriptedLM, ids: list[int], capture_attention: bool) -> None:
        self.lm, self.ids, self.capture_attention = lm, list(ids), capture_attention
        self.finished = False
        self.max_attention = torch.zeros(len(ids))
        start = max(i for i, t in enumerate(ids) if lm.words[t] == ASSISTANT) + 1
        self.prompt_text = lm.decode(ids[:start])
        self.answer_start = start
        lm.sessions.append(self)

    def _row(self, position: int) -> torch.Tensor:
        row = torch.full((position,), 0.01)
        for j in range(position):
            if self.lm.words[self.ids[j]].strip(".?,") in self.lm.focus:
                row[j] = 1.0
        return row / row.sum()

    def generate(self, n: int, *, stop=None, logits_processor=None, **_: object) -> Iterator[TokenStep]:
        answer = self.lm.script(self.prompt_text)
        steps: list[TokenStep] = []
        for _ in range(n):
            k = len(self.ids) - self.answer_start
            if k >= len(answer):
                self.finished = True
                return
            w = answer[k]
            tid = self.lm.word_id(w.text)
            position = len(self.ids)
            self.ids.append(tid)
            row = self._row(position) if self.capture_attention else None
            if row is not None:
                if self.max_attention.shape[0] < position + 1:
                    grown = torch.zeros(position + 1)
                    grown[: self.max_attention.shape[0]] = self.max_attention
                    self.max_attention = grown
                self.max_attention[:position] = torch.maximum(self.max_attention[:position], row)
            step = TokenStep(id=tid, text=" " + w.text, logprob=float(torch.tensor(w.prob).log()), entropy=w.entropy,
                             position=position, attention=row)
            steps.append(step)
            yield step
            if stop is not None and stop(steps):
                return

    def crop(self, length: int) -> None:
        del self.ids[length:]
        self.finished = False

    def extend(self, ids: Sequence[int]) -> None:
        self.ids.extend(ids)

    def commit(self) -> None:
        self.committed = len(self.ids)


@dataclass
class ScriptedLM:
    script: Script
    focus: set[str] = field(default_factory=set)
    max_context: int = 100_000
    name: str = "scripted"
    supports_attention: bool = True
    words: list[str] = field(default_factory=lambda: [ASSISTANT])
    sessions: list[ScriptedSession] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)
    eos_token_ids: frozenset[int] = frozenset()

    def word_id(self, w: str) -> int:
        if w not in self.words:
            self.words.append(w)
        return self.words.index(w)

    def encode(self, text: str) -> list[int]:
        return [self.word_id(w) for w in text.split()]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return " ".join(self.words[i] for i in ids)

    def token_text(self, context: Sequence[int], token_id: int) -> str:
        return " " + self.words[token_id]

    def chat_parts(self, user: str) -> tuple[str, str]:
        return "<user> ", f" {ASSISTANT}"

    def session(self, ids: Sequence[int], *, capture_attention: bool = False) -> ScriptedSession:
        return ScriptedSession(self, list(ids), capture_attention)

    def require_attention(self) -> None:
        pass

    def complete(self, prompt: str, *, max_new_tokens: int = 32, **_: object) -> str:
        self.completions.append(prompt)
        return "[No]." if "capital of France" in prompt else "[Yes]."


class Recorder:
    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        n = len(self.queries)
        return [Passage(id=f"r{n}-{i}", title=f"Doc {n}.{i}", text=f"evidence{n} text") for i in range(k)]


def words(text: str, **overrides: tuple[float, float]) -> list[Word]:
    """``overrides`` maps a word to (prob, entropy)."""
    return [Word(w, *overrides.get(w.strip(".?,"), (0.95, 0.1))) for w in text.split()]


QUESTION = "Who is the father of Kasper?"


def run(preset: str, script: Script, **kw: object) -> tuple[ActiveRAGResult, Recorder, ScriptedLM]:
    lm = ScriptedLM(script=script, focus=set(kw.pop("focus", set())))  # type: ignore[arg-type]
    rec = Recorder()
    result = ActiveRAG.from_preset(preset, lm, rec, **kw).run(QUESTION)  # type: ignore[arg-type]
    return result, rec, lm


def test_wo_rag_never_retrieves() -> None:
    result, rec, _ = run("wo-rag", lambda p: words("Kasper's father is Peter."))
    assert result.retrievals == [] and rec.queries == []
    assert result.answer == "Kasper's father is Peter."


def test_sr_rag_retrieves_once_with_the_question_before_generating() -> None:
    prompts: list[str] = []

    def script(p: str) -> list[Word]:
        prompts.append(p)
        return words("Peter.")

    result, rec, _ = run("sr-rag", script)
    assert rec.queries == [QUESTION]
    assert [r.position for r in result.retrievals] == [0]
    assert "evidence1" in prompts[0]  # documents are in the prompt of the first generation


def test_fl_rag_retrieves_every_16_tokens_with_the_previous_window() -> None:
    answer = " ".join(f"w{i}" for i in range(40))
    result, rec, _ = run("fl-rag", lambda p: words(answer), max_new_tokens=40)
    # initial retrieval with the input, then after tokens 16 and 32; not after the final window
    assert [r.position for r in result.retrievals] == [0, 16, 32]
    assert rec.queries[1] == " ".join(f"w{i}" for i in range(16))
    assert rec.queries[2] == " ".join(f"w{i}" for i in range(16, 32))
    assert len(result.tokens) == 40


def test_fs_rag_retrieves_after_every_sentence_with_that_sentence() -> None:
    result, rec, _ = run("fs-rag", lambda p: words("Kasper is a goalkeeper. His father is Peter. So the answer is Peter."))
    assert rec.queries == [QUESTION, "Kasper is a goalkeeper.", "His father is Peter."]
    assert result.answer == "Kasper is a goalkeeper. His father is Peter. So the answer is Peter."


def test_flare_regenerates_a_low_confidence_sentence_with_a_masked_query() -> None:
    def script(p: str) -> list[Word]:
        if "evidence2" in p:  # after the look-ahead retrieval
            return words("His father is Peter Schmeichel. Done.")
        return words("His father is Bob Smith. Done.", Bob=(0.1, 3.0), Smith=(0.2, 2.0))

    result, rec, _ = run("flare", script)
    assert rec.queries[0] == QUESTION  # FLARE starts with the input
    assert rec.queries[1] == "His father is"  # low-probability words (p < beta=0.4) are masked
    assert result.retrievals[1].token == " Bob" and result.retrievals[1].score == pytest.approx(0.1)
    assert result.answer.startswith("His father is Peter Schmeichel.")  # the look-ahead was regenerated
    assert "Bob" not in result.answer


def test_flare_keeps_confident_sentences_without_retrieving() -> None:
    result, rec, _ = run("flare", lambda p: words("His father is Peter. Done."))
    assert rec.queries == [QUESTION]
    assert len(result.decisions) == 2 and not any(d.fire for d in result.decisions)


def test_dragin_truncates_at_the_rind_token_and_queries_with_attention() -> None:
    def script(p: str) -> list[Word]:
        if "evidence1" in p:
            return words("Kasper's father is Peter Schmeichel. So the answer is Peter.")
        return words("Kasper's father is Bob Smith and more words follow here.", Bob=(0.2, 10.0))

    result, rec, lm = run("dragin", script, focus={"father", "Kasper", "Kasper's", "Bob"}, max_new_tokens=60,
                          context="keep-newest")  # the documents stay for the rest of the answer
    assert len(rec.queries) == 1
    r = result.retrievals[0]
    assert r.token == " Bob" and r.position == 3 and r.score is not None and r.score > 1.2
    # QFS: attended words of the question and of the output before the trigger, in original order
    assert rec.queries[0] == "father Kasper Kasper's father"
    # output truncated before " Bob", then continued with the documents
    assert result.answer == "Kasper's father is Peter Schmeichel. So the answer is Peter."
    assert r.details["selected_words"]


def test_dragin_without_a_trigger_keeps_one_cache() -> None:
    result, rec, lm = run("dragin", lambda p: words("Peter is the father."), focus={"father"})
    assert rec.queries == [] and len(lm.sessions) == 1
    assert result.answer == "Peter is the father."


def test_flare_instruct_removes_the_search_tag_and_uses_its_query() -> None:
    def script(p: str) -> list[Word]:
        if "evidence2" in p:
            return words("The father is Peter. So the answer is Peter.")
        return words("The father is [Search(Kasper father)] unknown.")

    result, rec, _ = run("flare-instruct", script)
    assert rec.queries == [QUESTION, "Kasper father"]
    assert "[Search" not in result.answer
    assert result.retrievals[1].position == 3
    assert result.answer == "The father is Peter. So the answer is Peter."


def test_self_ask_retrieves_for_each_follow_up_question() -> None:
    def script(p: str) -> list[Word]:
        return [Word(w) for w in "Yes. Follow up: Who is Kasper's father?\nIntermediate answer: Peter.\nSo the final answer is: Peter".replace("\n", " \n ").split(" ") if w]

    result, rec, _ = run("self-ask", script)
    assert rec.queries == ["Who is Kasper's father?"]
    assert result.retrievals[0].trigger == "follow-up"
    assert result.answer.endswith("So the final answer is: Peter")


def test_retrieval_budget_is_respected() -> None:
    answer = " ".join(f"w{i}" for i in range(80))
    result, rec, _ = run("fl-rag", lambda p: words(answer), max_new_tokens=80, max_retrievals=2)
    assert len(rec.queries) == 2


def test_router_saying_no_skips_retrieval() -> None:
    class No:
        def decide(self, q: str) -> RouteDecision:
            return RouteDecision(retrieve=False, router="stub", raw_output="[No].")

    result, rec, _ = run("sr-rag", lambda p: words("Paris."), router=No())
    assert rec.queries == [] and result.route is not None and result.route.raw_output == "[No]."


def test_stream_yields_retrievals_then_the_tokens_they_enable() -> None:
    lm = ScriptedLM(script=lambda p: words("Kasper is a goalkeeper. His father is Peter."))
    events = list(ActiveRAG.from_preset("fs-rag", lm, Recorder()).stream(QUESTION))
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "Retrieval" and kinds[-1] == "ActiveRAGResult"
    tokens = "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert tokens.strip() == events[-1].answer
    first_retrieval_after_tokens = next(i for i, e in enumerate(events) if isinstance(e, Retrieval) and i > 0)
    # the first sentence's decision comes first, then its retrieval ("continue": the tokens follow it)
    assert isinstance(events[1], TriggerDecision) and events[1].fire
    assert first_retrieval_after_tokens == 2
    decisions = [e for e in events if isinstance(e, TriggerDecision)]
    assert decisions == events[-1].decisions


def test_answer_phrase_is_appended_when_missing() -> None:
    def script(p: str) -> list[Word]:
        return words("Peter.") if "So the answer is" not in p else words("Peter.")

    lm = ScriptedLM(script=lambda p: words("Peter is his father."))
    result = ActiveRAG.from_preset("wo-rag", lm, None, answer_phrase="So the answer is").run(QUESTION)
    assert "So the answer is" in result.answer


def test_stop_callable_ends_generation() -> None:
    lm = ScriptedLM(script=lambda p: words("So the answer is Peter. Extra words here."))
    result = ActiveRAG.from_preset("wo-rag", lm, None, stop=lambda t: t.rstrip().endswith("Peter.")).run(QUESTION)
    assert result.answer == "So the answer is Peter."


def test_errors_are_clear() -> None:
    lm = ScriptedLM(script=lambda p: words("x."))
    with pytest.raises(EmptyQuestionError):
        ActiveRAG.from_preset("sr-rag", lm, Recorder()).run("   ")
    with pytest.raises(UnknownNameError, match="dragin"):
        ActiveRAG.from_preset("dragn", lm, Recorder())
    with pytest.raises(ValueError, match="no retriever"):
        ActiveRAG.from_preset("sr-rag", lm, None)

    class Broken:
        def retrieve(self, q: str, k: int) -> list[Passage]:
            raise ConnectionError("index server down")

    with pytest.raises(RetrieverError, match="index server down") as info:
        ActiveRAG.from_preset("sr-rag", lm, Broken()).run(QUESTION)
    assert isinstance(info.value.__cause__, ConnectionError)

    class Wrong:
        def retrieve(self, q: str, k: int) -> list[str]:
            return ["text"]

    with pytest.raises(RetrieverError, match="returned a list of strings"):
        ActiveRAG.from_preset("sr-rag", lm, Wrong()).run(QUESTION)  # type: ignore[arg-type]

    class Mapping:
        def retrieve(self, q: str, k: int) -> dict[str, str]:
            return {"a": "text"}

    with pytest.raises(RetrieverError, match="returned a dict for query .* must return a list of active_rag.Passage"):
        ActiveRAG.from_preset("sr-rag", lm, Mapping()).run(QUESTION)  # type: ignore[arg-type]


def test_context_overflow_drops_lowest_ranked_passages_then_fails() -> None:
    def prompt_length(passages: int) -> int:
        probe = ScriptedLM(script=lambda p: words("Peter."))
        ActiveRAG.from_preset("sr-rag", probe, Recorder(), top_k=passages, max_new_tokens=8).run(QUESTION)
        return probe.sessions[0].answer_start

    lm = ScriptedLM(script=lambda p: words("Peter."))
    assert prompt_length(3) > prompt_length(2)
    lm.max_context = prompt_length(2) + 8  # + 8 tokens to generate: room for two passages but not three
    with pytest.warns(UserWarning, match="Context window full: retrieval 1 kept 2 of 3 passages"):
        result = ActiveRAG.from_preset("sr-rag", lm, Recorder(), top_k=3, max_new_tokens=8).run(QUESTION)
    (r,) = result.retrievals
    assert r.passage_ids == ["r1-0", "r1-1"] and [p.id for p in r.dropped] == ["r1-2"]
    assert "context window" in r.dropped_reason and (r.top_k, r.returned) == (3, 3)
    assert [p.id for p in result.passages] == ["r1-0", "r1-1"]
    assert "Doc 1.1" in lm.sessions[0].prompt_text and "Doc 1.2" not in lm.sessions[0].prompt_text
    assert r.to_dict()["dropped_ids"] == ["r1-2"] and result.to_dict()["passages"][-1]["id"] == "r1-1"
    lm.max_context = 5
    with pytest.raises(ContextOverflowError, match="context of 5 tokens"):
        ActiveRAG.from_preset("wo-rag", lm, None, max_new_tokens=8).run(QUESTION)


# -- the real running max of later attention (DRAGIN Eq. 3) -----------------------------------------------
def _tiny_llama(vocab_size: int, attn: str) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(7)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, eos_token_id=None,
                         bos_token_id=None, pad_token_id=None, attn_implementation=attn,
                         initializer_range=0.2)  # large weights: attention far from uniform, rows differ
    return LlamaForCausalLM(config).eval()


@dataclass
class RealModel:
    lm: ActiveLM
    reference: torch.nn.Module  # an uninstrumented eager copy of the same weights

    def attention(self, ids: Sequence[int]) -> torch.Tensor:
        """The full last-layer attention matrix of ``ids`` (head-averaged), from one forward pass."""
        with torch.no_grad():
            out = self.reference(torch.tensor([list(ids)]), output_attentions=True)
        return out.attentions[-1][0].float().mean(0)

    def brute_force_a_max(self, ids: Sequence[int], generated: Sequence[int]) -> torch.Tensor:
        """``a_max(j) = max_{p > j} A[p, j]`` over the generated positions ``p`` (0 where none), element by element."""
        a = self.attention(ids)
        out = torch.zeros(len(ids))
        for j in range(len(ids)):
            later = [float(a[p, j]) for p in generated if p > j]
            out[j] = max(later, default=0.0)
        return out


@pytest.fixture(scope="module")
def real(tiny_tokenizer) -> RealModel:
    model = _tiny_llama(len(tiny_tokenizer), "sdpa")
    reference = _tiny_llama(len(tiny_tokenizer), "eager")
    reference.load_state_dict(model.state_dict())
    return RealModel(ActiveLM(model, tiny_tokenizer, name="tiny-loop-llama"), reference)


def _ban_at(position: int, token_id: int) -> Callable[[list[int], torch.Tensor], torch.Tensor]:
    """A logits processor that forbids ``token_id`` at ``position``: generation there takes another way."""

    def processor(ids: list[int], scores: torch.Tensor) -> torch.Tensor:
        if len(ids) == position:
            scores[token_id] = float("-inf")
        return scores

    return processor


def test_real_sessions_running_max_equals_full_attention_across_commit_crop_and_new_tokens(real: RealModel) -> None:
    """``DecodingSession.max_attention`` (what RIND reads) against a_max recomputed from the full attention
    matrices of ``output_attentions=True`` forwards: after two segments with a commit between them, after a crop
    inside the uncommitted segment, and after decoding other tokens than the cropped ones."""
    atol = 1e-5
    prompt = real.lm.prompt_ids(QUESTION)
    session = real.lm.session(prompt, capture_attention=True)
    first = list(session.generate(6))
    session.commit()  # the engine commits accepted segments: their rows are dropped, a_max is kept
    second = list(session.generate(8))
    generated = [s.position for s in first + second]
    assert generated == list(range(len(prompt), len(prompt) + 14))
    full = real.brute_force_a_max(session.ids, generated)
    assert session.max_attention.shape == (len(session.ids),)
    torch.testing.assert_close(session.max_attention, full, atol=atol, rtol=0)

    cut = second[3].position
    session.crop(cut)
    assert session.ids == prompt + [s.id for s in first + second[:3]]
    kept = [p for p in generated if p < cut]
    after_crop = real.brute_force_a_max(session.ids, kept)
    # the cropped rows were the maximum somewhere: an a_max that kept them would be caught
    assert float((full[:cut] - after_crop).abs().max()) > 100 * atol
    assert session.max_attention.shape == (cut,)
    torch.testing.assert_close(session.max_attention, after_crop, atol=atol, rtol=0)

    third = list(session.generate(5, logits_processor=_ban_at(cut, second[3].id)))
    assert third[0].id != second[3].id and third[0].position == cut
    continued = real.brute_force_a_max(session.ids, kept + [s.position for s in third])
    torch.testing.assert_close(session.max_attention, continued, atol=atol, rtol=0)
    a = real.attention(session.ids)
    for s in third:  # each new row is the new token's attention over every earlier position
        torch.testing.assert_close(s.attention, a[s.position, : s.position], atol=atol, rtol=0)


def test_rind_trigger_reads_the_real_running_max_and_fires_where_brute_force_says(real: RealModel) -> None:
    """RIND's a_max and raw scores (Eq. 5: H * a_max * s) on a real session after a crop equal the brute-force
    ones, and with a threshold between the two largest brute-force scores it fires at the largest."""
    from active_rag.components.triggers import RindTrigger, SegmentContext

    prompt = real.lm.prompt_ids("Were Scott Derrickson and Ed Wood of the same nationality?")
    session = real.lm.session(prompt, capture_attention=True)
    dropped = list(session.generate(10))
    session.crop(dropped[2].position)
    segment = list(session.generate(12, logits_processor=_ban_at(dropped[2].position, dropped[2].id)))
    expected = real.brute_force_a_max(session.ids, [s.position for s in dropped[:2] + segment])
    ctx = SegmentContext(segment, session.max_attention)
    signals = RindTrigger(scale="raw", theta=0.0).signals(ctx)
    assert signals["max_attention"] == pytest.approx([float(expected[s.position]) for s in segment], abs=1e-5)
    assert signals["max_attention"][-1] == 0.0  # nothing attends to the last token yet
    brute = [s.entropy * float(expected[s.position]) * c for s, c in zip(segment, signals["semantic"], strict=True)]
    assert signals["rind"] == pytest.approx(brute, abs=1e-5)
    ranked = sorted(range(len(brute)), key=brute.__getitem__, reverse=True)
    best, runner_up = brute[ranked[0]], brute[ranked[1]]
    assert best - runner_up > 1e-3  # the threshold below sits well clear of both
    decision = RindTrigger(scale="raw", theta=(best + runner_up) / 2).check(ctx)
    assert decision.fire and decision.index == ranked[0] and decision.score == pytest.approx(best, abs=1e-5)


def test_dragin_loop_gives_rind_the_sessions_running_max(real: RealModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the engine: the a_max in each RIND decision is the brute-force one of the session it came from."""
    from active_rag.components.triggers import RindTrigger

    sessions: list[tuple[int, object]] = []
    open_session = real.lm.session

    def recording(ids: Sequence[int], **kw: object):
        s = open_session(ids, **kw)
        sessions.append((len(ids), s))
        return s

    monkeypatch.setattr(real.lm, "session", recording)
    result = ActiveRAG(real.lm, Recorder(), trigger=RindTrigger(scale="raw", theta=1e9), max_new_tokens=12).run(QUESTION)
    assert len(sessions) == 1 and len(result.decisions) == 1 and not result.decisions[0].fire
    (prompt_len, session), decision = sessions[0], result.decisions[0]
    a_max = decision.token_signals["max_attention"]
    n = len(a_max)
    assert n == len(result.tokens) == 12
    ids = session.ids[: prompt_len + n]  # type: ignore[attr-defined]
    expected = real.brute_force_a_max(ids, range(prompt_len, prompt_len + n))
    assert a_max == pytest.approx(expected[prompt_len:].tolist(), abs=1e-5)
    assert max(a_max) > 0.0


def test_forced_answer_runs_past_a_newline_right_after_the_phrase() -> None:
    """Qwen writes "So the answer is:" then a blank line then the answer; the answer must not be lost."""
    from active_rag.evaluation.answers import extract_answer

    def script(p: str) -> list[Word]:
        return [Word(w) for w in ["Some", "reasoning", "without", "a", "conclusion.", "So", "the", "answer", "is:", "\n", "\n", "Peter.", "More"]]

    lm = ScriptedLM(script=script)
    # the answer budget ends right after "conclusion.": the phrase is forced, then the model finishes it
    result = ActiveRAG.from_preset("wo-rag", lm, None, max_new_tokens=5, answer_phrase="So the answer is").run(QUESTION)
    assert extract_answer(result.answer) == "Peter"


def test_trace_lists_exactly_the_passages_in_the_prompt_and_warns_once() -> None:
    """The issue's `--top-k 1000` case in small: many passages, few fit; FL-RAG retrieves several times."""
    import warnings

    lm = ScriptedLM(script=lambda p: words("Peter Schmeichel is the father of Kasper and he was a goalkeeper " * 4))
    lm.max_context = 120
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = ActiveRAG.from_preset("fl-rag", lm, Recorder(), top_k=40, max_new_tokens=40).run(QUESTION)
    assert len(result.retrievals) >= 2
    assert len([w for w in caught if "Context window full" in str(w.message)]) == 1
    assert len(result.warnings) == 1
    for r, session in zip(result.retrievals, lm.sessions[:len(result.retrievals)], strict=True):
        assert r.returned == 40 and 0 < len(r.passages) < 40 and len(r.passages) + len(r.dropped) == 40
        n = len(r.passages)
        doc = r.passages[0].title.split()[1].split(".")[0]
        assert f"Doc {doc}.{n - 1} " in session.prompt_text + " " and f"Doc {doc}.{n} " not in session.prompt_text + " "
    in_prompt = [p.id for r in result.retrievals for p in r.passages]
    assert [p.id for p in result.passages] == in_prompt


class Few:
    """A retriever that returns fewer passages than asked, as BM25 does when few passages share a query word."""

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return [Passage(id="only", text="Peter is the father")]


def test_a_retriever_may_return_fewer_than_k_and_the_trace_says_so() -> None:
    lm = ScriptedLM(script=lambda p: words("Peter."))
    result = ActiveRAG.from_preset("sr-rag", lm, Few(), top_k=3).run(QUESTION)
    (r,) = result.retrievals
    assert (r.top_k, r.returned, r.passage_ids, r.dropped) == (3, 1, ["only"], [])
    assert r.to_dict()["returned"] == 1 and r.to_dict()["top_k"] == 3


@pytest.mark.parametrize("question", [None, b"Who?", 42, ["Who?"]])
def test_a_question_that_is_not_a_string_names_its_type(question: object) -> None:
    from active_rag.errors import QuestionTypeError

    rag = ActiveRAG.from_preset("sr-rag", ScriptedLM(script=lambda p: words("x.")), Recorder())
    with pytest.raises(QuestionTypeError, match=f"must be a string, got {type(question).__name__}"):
        rag.run(question)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top_k": 0}, "top_k must be between 1 and 100, got 0"),
        ({"top_k": 1000}, "top_k must be between 1 and 100, got 1000"),
        ({"top_k": 2.5}, "top_k must be an integer"),
        ({"max_new_tokens": 0}, "max_new_tokens must be at least 1"),
        ({"settings": RunSettings(max_retrievals=-1)}, "max_retrievals must be at least 0"),
        ({"trigger": "rind", "query": "attention", "top_k": True}, "top_k must be an integer"),
    ],
)
def test_engine_options_are_validated(kwargs: dict[str, object], message: str) -> None:
    from active_rag.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match=message):
        ActiveRAG(ScriptedLM(script=lambda p: words("x.")), Recorder(), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("trigger", "kwargs", "message"),
    [
        ("rind", {"theta": float("nan")}, "rind theta must be a finite number, got nan"),
        ("rind", {"theta": -0.5}, "rind theta must be at least 0"),
        ("low-confidence", {"theta": 1.5}, "low-confidence theta must be between 0 and 1"),
        ("low-confidence", {"theta": float("inf")}, "finite"),
        ("fixed-length", {"max_tokens": 0}, "fixed-length max_tokens must be at least 1"),
    ],
)
def test_trigger_constructors_reject_bad_numbers(trigger: str, kwargs: dict[str, float], message: str) -> None:
    from active_rag.errors import InvalidOptionError
    from active_rag.components.triggers import make_trigger

    with pytest.raises(InvalidOptionError, match=message):
        make_trigger(trigger, **kwargs)


# -- paper fidelity (issue 9) ----------------------------------------------------------------------------
def _two_trigger_script(p: str) -> list[Word]:
    """Uncertain "Bob" without documents, uncertain "Zonk" with the first retrieval's, sure with the second's."""
    if "evidence2" in p:
        return words("Kasper's father is Peter. Peter won IFFHS. So the answer is IFFHS.")
    if "evidence1" in p:
        return words("Kasper's father is Peter. Peter won Zonk. So the answer is Zonk.", Zonk=(0.2, 10.0))
    return words("Kasper's father is Bob. Bob won Gold. So the answer is Gold.", Bob=(0.2, 10.0))


def test_dragin_triggers_twice_in_one_answer_and_retrieves_twice() -> None:
    """After a retrieval the continuation's first sentence is kept and the generation is checked again
    (DRAGIN's released code), so a second uncertain word triggers a second retrieval."""

    result, rec, _ = run("dragin", _two_trigger_script, focus={"Kasper's", "father", "Bob", "Zonk", "Peter"}, max_new_tokens=60,
                         context="keep-newest")  # the script's second trigger needs the first retrieval's documents
    assert len(rec.queries) == 2 and len(result.retrievals) == 2
    assert [r.token for r in result.retrievals] == [" Bob.", " Zonk."]
    assert [r.position for r in result.retrievals] == [3, 6]  # truncated before the triggering words
    assert result.answer == "Kasper's father is Peter. Peter won IFFHS. So the answer is IFFHS."


def test_dragin_code_drops_the_whole_hallucinated_sentence() -> None:
    """``truncate="sentence"`` (preset dragin-code): as DRAGIN's released code, only the sentences before the
    hallucinated one are kept, so a trigger in the first sentence regenerates the answer from its start."""

    result, rec, _ = run("dragin-code", _two_trigger_script, focus={"Kasper's", "father", "Bob", "Zonk", "Peter"}, max_new_tokens=60,
                         context="keep-newest")
    assert [r.token for r in result.retrievals] == [" Bob.", " Zonk."]
    assert [r.position for r in result.retrievals] == [0, 4]  # at the start of the sentence that holds the word
    assert result.answer == "Kasper's father is Peter. Peter won IFFHS. So the answer is IFFHS."


def test_rind_truncate_option_is_validated() -> None:
    from active_rag.errors import InvalidOptionError
    from active_rag.components.triggers import make_trigger

    with pytest.raises(InvalidOptionError, match="rind truncate must be one of word, sentence, got 'token'"):
        make_trigger("rind", truncate="token")


def test_flare_look_ahead_is_generated_without_passages() -> None:
    def script(p: str) -> list[Word]:
        if "evidence2" in p:
            return words("His father is Peter. He won IFFHS. Done.")
        return words("His father is Peter. He won Bob. Done.", Bob=(0.1, 3.0))

    result, rec, lm = run("flare", script)
    assert rec.queries[0] == QUESTION and len(rec.queries) == 2
    prompts = [s.prompt_text for s in lm.sessions]
    # 0: first sentence with the input's documents (App. A); 1: look-ahead; 2: regeneration; 3: next look-ahead
    assert "evidence1" in prompts[0]
    assert "evidence" not in prompts[1] and "Search results" not in prompts[1]
    assert "evidence2" in prompts[2]
    assert all("evidence" not in p for p in prompts[3:])
    assert result.answer == "His father is Peter. He won IFFHS. Done."


def test_truncation_starts_at_the_word_that_holds_the_token() -> None:
    from active_rag.text import word_start

    steps = [TokenStep(id=i, text=t, logprob=0.0, entropy=0.0, position=i) for i, t in enumerate([" The", " goal", "keeper", " is"])]
    assert word_start(steps, 2) == 1 and word_start(steps, 1) == 1 and word_start(steps, 3) == 3


def test_repetition_guard_stops_at_a_repeated_sentence() -> None:
    lm = ScriptedLM(script=lambda p: words("Peter is the father. Peter is the father. Peter is the father."))
    result = ActiveRAG.from_preset("wo-rag", lm, None).run(QUESTION)
    assert result.answer == "Peter is the father."
    unguarded = ActiveRAG.from_preset("wo-rag", lm, None, repetition_guard=False).run(QUESTION)
    assert unguarded.answer.count("Peter is the father.") == 3


def test_generation_stops_once_the_answer_sentence_is_complete() -> None:
    lm = ScriptedLM(script=lambda p: words("Peter is his father. So the answer is Peter. Extra words follow here."))
    result = ActiveRAG.from_preset("wo-rag", lm, None, answer_phrase="So the answer is").run(QUESTION)
    assert result.answer == "Peter is his father. So the answer is Peter."


def test_a_forced_answer_phrase_closes_the_unfinished_sentence_and_cuts_nothing() -> None:
    """The budget runs out mid-sentence: the sentence is kept, ended with a full stop, and the phrase follows, so
    every token the model wrote (and that was streamed) stays in the answer."""
    script = ["Peter", "is", "his", "father.", "He", "was", "a", "goalkeeper", "Peter.", "x"]
    lm = ScriptedLM(script=lambda p: [Word(w) for w in script])
    rag = ActiveRAG.from_preset("wo-rag", lm, None, max_new_tokens=6, answer_phrase="So the answer is")
    events = list(rag.stream(QUESTION))
    result = events[-1]
    # the scripted model writes each word after a space, the full stop too: "He was . So the answer is"
    assert result.answer.replace(" .", ".").startswith("Peter is his father. He was. So the answer is")
    assert [e.position for e in events if isinstance(e, TokenEvent)] == list(range(len(result.tokens)))  # no rewind


def test_no_retrieval_cap_by_default() -> None:
    answer = " ".join(f"w{i}" for i in range(128))
    result, rec, _ = run("fl-rag", lambda p: words(answer), max_new_tokens=128)
    assert len(rec.queries) == 8  # the input, then every 16 tokens but the last window (FLARE §4)


def test_calibration_collects_one_score_per_sentence_without_retrieving() -> None:
    from active_rag.engine.calibration import collect_check_scores

    lm = ScriptedLM(script=lambda p: words("Kasper's father is Bob. Bob won Gold.", Bob=(0.2, 10.0)), focus={"father", "Bob"})
    rec = Recorder()
    rag = ActiveRAG.from_preset("dragin", lm, rec, max_new_tokens=40)
    scores = collect_check_scores(rag, [QUESTION, "Who won?"])
    assert rec.queries == [] and [len(s) for s in scores] == [2, 2]  # two sentences each, nothing retrieved
    assert scores[0][0] > 1.2  # " Bob." would have fired
