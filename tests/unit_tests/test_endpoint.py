"""RemoteLM (issue 26) against a fake OpenAI-compatible server (``endpoint_fakes``): the methods that need only token
probabilities run, the attention methods refuse at construction, and every failure is one line (CLI exit code 2)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from active_rag import ActiveRAG
from active_rag.cli.commands import main
from active_rag.errors import (
    EndpointHTTPError,
    EndpointTimeoutError,
    EndpointUnreachableError,
    InvalidOptionError,
    NeedsLocalModelError,
    NoLogprobsError,
)
from active_rag.remote.lm import ASSISTANT_MARK, USER_MARK, RemoteLM
from active_rag.remote.http import resolve_base_url
from active_rag.remote.parse import parse_choice, topk_entropy
from active_rag.remote.vocab import PieceVocab
from active_rag.types import Passage
from endpoint_fakes import Script, fake_endpoint, free_port
from tests.recipes import recipe

ANSWER = ["Paris", " is", " in", " France", ".", " So", " the", " answer", " is", " Paris", "."]


class TinyRetriever:
    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int = 3) -> list[Passage]:
        self.queries.append(query)
        return [Passage(id=f"p{i}", title="Paris", text="Paris is the capital of France.") for i in range(k)]


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text
    return text


# -- parsing and vocabulary --------------------------------------------------------------------------------
def test_topk_entropy_is_a_lower_bound_with_the_rest_as_one_outcome() -> None:
    assert topk_entropy({"a": 0.0}, "a", 0.0) == pytest.approx(0.0)
    two = {"a": math.log(0.5), "b": math.log(0.5)}
    assert topk_entropy(two, "a", math.log(0.5)) == pytest.approx(math.log(2))
    # top-1 of 0.5, the other half unknown: one extra outcome of 0.5
    assert topk_entropy({"a": math.log(0.5)}, "a", math.log(0.5)) == pytest.approx(math.log(2))
    # spreading the rest can only raise the true entropy
    assert topk_entropy({"a": math.log(0.5)}, "a", math.log(0.5)) <= -0.5 * math.log(0.5) - 5 * 0.1 * math.log(0.1)


def test_parse_legacy_and_chat_formats() -> None:
    legacy = {"text": "Hi there", "finish_reason": None,
              "logprobs": {"tokens": ["Hi", " there"], "token_logprobs": [-0.5, -1.0], "top_logprobs": [{"Hi": -0.5}, {" there": -1.0}]}}
    pieces, finish = parse_choice(legacy, "http://x/v1/completions")
    assert [p.text for p in pieces] == ["Hi", " there"] and [p.logprob for p in pieces] == [-0.5, -1.0] and finish is None
    # a character split over two byte-level tokens goes to the token that completes it
    e_acute = "é".encode()
    chat = {"delta": {"content": "é"}, "finish_reason": "stop", "logprobs": {"content": [
        {"token": "\\xc3", "logprob": -0.1, "bytes": [e_acute[0]], "top_logprobs": []},
        {"token": "\\xa9", "logprob": -0.2, "bytes": [e_acute[1]], "top_logprobs": []}]}}
    pieces, finish = parse_choice(chat, "http://x/v1/chat/completions")
    assert [p.text for p in pieces] == ["", "é"] and finish == "stop"


def test_parse_without_logprobs_is_one_line() -> None:
    with pytest.raises(NoLogprobsError) as info:
        parse_choice({"text": "Hi", "logprobs": None}, "http://x/v1/completions")
    assert "log-probabilities" in _one_line(info.value)


def test_piece_vocab_round_trips() -> None:
    vocab = PieceVocab()
    text = "Who wrote  Hamlet?\n\nAnswer: Shakespeare, in 1600 — \ue001x\ue002 ok "
    assert vocab.decode(vocab.encode(text)) == text


def test_base_url_checks() -> None:
    assert resolve_base_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080/v1"
    assert resolve_base_url("http://h:1/v1/") == "http://h:1/v1"
    for bad in ("127.0.0.1:8080", "ftp://h/v1", "http://h:port/v1", ""):
        with pytest.raises(InvalidOptionError) as info:
            resolve_base_url(bad)
        assert "--endpoint" in _one_line(info.value)


def test_base_url_and_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_endpoint() as (url, script):
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        lm = RemoteLM()
        assert lm.base_url == url and lm.model_id == "fake-model" and lm.client.api_key == "sk-test"


# -- methods through the server --------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["wo-rag", "sr-rag", "flare", "fl-rag", "fs-rag", "flare-instruct", "self-ask"])
def test_methods_run_on_the_endpoint(method: str) -> None:
    with fake_endpoint(Script(tokens=ANSWER, logprobs_for={" France": -2.0})) as (url, script):
        lm = RemoteLM(url)
        rag = ActiveRAG.from_preset(method, lm, TinyRetriever(), max_new_tokens=24, max_retrievals=2)
        result = rag.run("Where is Paris?")
        assert result.answer.startswith("Paris is in France")
        assert script.requests and all(r["logprobs"] == 5 for r in script.requests if "prompt" in r)
        if method == "flare":
            fired = [d for d in result.decisions if d.fire]
            assert fired and "' France'" in fired[0].reason and result.retrievals


def test_tokens_carry_server_logprobs_and_topk_entropy() -> None:
    with fake_endpoint(Script(tokens=["A", "B"], logprob=math.log(0.5))) as (url, _):
        steps = list(RemoteLM(url).stream("q", max_new_tokens=8))
    assert [s.text for s in steps] == ["A", "B"]
    assert steps[0].prob == pytest.approx(0.5) and steps[0].entropy > 0


def test_stop_rule_closes_the_stream_and_crop_extend_edit_the_ids() -> None:
    with fake_endpoint(Script(tokens=ANSWER)) as (url, script):
        lm = RemoteLM(url)
        session = lm.session(lm.encode("Q: where? A:"))
        start = len(session)
        steps = list(session.generate(20, stop=lambda s: s[-1].text == "."))
        assert "".join(s.text for s in steps) == "Paris is in France."
        assert len(script.requests) == 1 and script.requests[0]["max_tokens"] == 20 and script.requests[0]["stream"]
        session.crop(start + 1)
        session.extend(lm.encode(" was"))
        assert lm.decode(session.ids).endswith("A:Paris was")
        list(session.generate(2))
        assert script.requests[-1]["prompt"].endswith("A:Paris was") and script.requests[-1]["max_tokens"] == 2


def test_non_streaming_replies_and_chat_format_logprobs_on_completions() -> None:
    with fake_endpoint(Script(tokens=ANSWER[:3], mode="chatfmt")) as (url, _):
        assert RemoteLM(url, stream=False).complete("q") == "Paris is in"
        assert RemoteLM(url).complete("q") == "Paris is in"


def test_chat_api_sends_turns_and_continues_the_answer() -> None:
    with fake_endpoint(Script(tokens=ANSWER[:3])) as (url, script):
        lm = RemoteLM(url, api="chat", system_prompt="Be brief.")
        before, after = lm.chat_parts("x")
        assert (before, after) == (USER_MARK, ASSISTANT_MARK)
        text = f"{USER_MARK}Q1{ASSISTANT_MARK} A1\n\n{USER_MARK}Q2{ASSISTANT_MARK} Paris"
        session = lm.session(lm.encode(text))
        assert "".join(s.text for s in session.generate(3)) == "Paris is in"
        body = script.requests[-1]
        assert body["path"].endswith("/chat/completions") and body["logprobs"] is True and body["top_logprobs"] == 5
        assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user", "assistant"]
        assert body["messages"][-1]["content"] == " Paris" and body["continue_final_message"] is True


def test_flare_instruct_bias_becomes_logit_bias() -> None:
    with fake_endpoint(Script(tokens=ANSWER)) as (url, script):
        lm = RemoteLM(url)
        rag = ActiveRAG.from_preset("flare-instruct", lm, TinyRetriever(), max_new_tokens=8)
        rag.run("Where is Paris?")
        biased = [r for r in script.requests if r.get("logit_bias")]
        assert biased and biased[0]["logit_bias"] == {"91": 2.0, "510": 2.0}  # "[" and " [" from /extras/tokenize


def test_many_questions_in_flight_are_concurrent_requests() -> None:
    with fake_endpoint(Script(tokens=ANSWER, delay=0.2)) as (url, script):
        rag = ActiveRAG.from_preset("wo-rag", RemoteLM(url), max_new_tokens=12)
        results = rag.run_batch([f"Question {i}?" for i in range(4)], batch_size=4)
        assert all(r.answer.startswith("Paris") for r in results)
        assert script.max_in_flight >= 2


# -- refusals ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [{"preset": "dragin"}, {"trigger": "rind", "query": "last-sentence"},
                                    {"trigger": "low-confidence", "query": "attention"}])
def test_attention_methods_refuse_at_construction(kwargs: dict[str, str]) -> None:
    with fake_endpoint() as (url, script):
        lm = RemoteLM(url)
        with pytest.raises(NeedsLocalModelError) as info:
            if "preset" in kwargs:
                ActiveRAG.from_preset(kwargs["preset"], lm, TinyRetriever())
            else:
                ActiveRAG(lm, TinyRetriever(), **kwargs)
        assert "needs attention and a local model" in _one_line(info.value)
        assert not [r for r in script.requests if "prompt" in r or "messages" in r]


# -- failures: one line each ---------------------------------------------------------------------------
def test_no_logprobs_is_one_line() -> None:
    with fake_endpoint(Script(mode="nologprobs")) as (url, _):
        with pytest.raises(NoLogprobsError) as info:
            RemoteLM(url).complete("q")
    assert "without token log-probabilities" in _one_line(info.value)


def test_unreachable_is_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EndpointUnreachableError) as info:
        RemoteLM(url, model="m", retries=1, backoff=0).complete("q")
    assert "Cannot reach the endpoint" in _one_line(info.value)


def test_http_500_is_retried_then_one_line() -> None:
    with fake_endpoint(Script(mode="500")) as (url, script):
        with pytest.raises(EndpointHTTPError) as info:
            RemoteLM(url, model="m", retries=2, backoff=0).complete("q")
        assert len(script.requests) == 3
    assert info.value.status == 500 and "HTTP 500 (model crashed) on 3 tries" in _one_line(info.value)


def test_timeout_is_one_line() -> None:
    with fake_endpoint(Script(delay=2.0)) as (url, _):
        with pytest.raises(EndpointTimeoutError) as info:
            RemoteLM(url, model="m", timeout=0.3, retries=0).complete("q")
    assert "did not answer within 0.3 s" in _one_line(info.value)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["ask", "Where is Paris?", *argv])
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["nologprobs", "500", "slow", "unreachable"])
def test_cli_failures_exit_2_with_one_line(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    if mode == "unreachable":
        code, err = _cli(capsys, "--method", "wo-rag", "--endpoint", f"http://127.0.0.1:{free_port()}/v1",
                         "--endpoint-model", "m")
    else:
        script = Script(mode="ok" if mode == "slow" else mode, delay=3.0 if mode == "slow" else 0.0)
        with fake_endpoint(script) as (url, _):
            code, err = _cli(capsys, "--method", "wo-rag", "--endpoint", url, "--endpoint-timeout", "0.3")
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err


@pytest.mark.parametrize("argv, needle", [
    (["--endpoint", "localhost:8080"], "is not an http(s) URL"),
    (["--endpoint-model", "m"], "--endpoint-model only applies with --endpoint"),
    (["--endpoint", "http://127.0.0.1:9/v1", "--weights", "int8"], "--weights has no effect with --endpoint"),
    (["--endpoint", "http://127.0.0.1:9/v1", "--method", "dragin"], "needs attention and a local model"),
])
def test_cli_bad_input_exits_2_naming_the_fix(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, *argv)
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_cli_ask_through_the_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_endpoint(Script(tokens=ANSWER)) as (url, _):
        code = main(["ask", "Where is Paris?", "--method", "wo-rag", "--endpoint", url, "--max-new-tokens", "16"])
    out = capsys.readouterr().out
    assert code == 0 and "Answer:   Paris is in France." in out


# -- eval and bench through the endpoint -------------------------------------------------------------------
def _hotpot_dir(root: Path) -> Path:
    import json

    def write(path: Path, rows: list[dict[str, object]]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    write(root / "hotpotqa/questions_dev.jsonl", [
        {"question_id": f"q{i}", "question_text": f"Where is Paris {i}?", "answers_objects": [{"spans": ["France"]}],
         "contexts": [{"id": "0", "title": "Paris", "paragraph_text": "Paris is in France.", "is_supporting": True}]}
        for i in range(3)])
    write(root / "hotpotqa/corpus.jsonl", [{"id": "p1", "title": "Paris", "text": "Paris is the capital of France."},
                                           {"id": "p2", "title": "Hamlet", "text": "Hamlet is a play."}])
    return root


def test_cli_eval_through_the_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _hotpot_dir(tmp_path / "data")
    with fake_endpoint(Script(tokens=ANSWER)) as (url, script):
        code = main(["eval", "--dataset", "hotpotqa", "--data-dir", str(data), "--methods", "sr-rag,flare", "--limit", "3",
                     "--out", str(tmp_path / "out"), "--max-new-tokens", "16", "--index-cache", str(tmp_path / "idx"),
                     "--no-progress", "--no-plots", "--batch-size", "3", "--endpoint", url])
        assert script.max_in_flight >= 2
    assert code == 0, capsys.readouterr().err
    rows = (tmp_path / "out/hotpotqa/fake-model-endpoint/flare.jsonl").read_text().splitlines()
    assert len(rows) == 3
    # no --methods: the default methods are those an endpoint can run; an attention method named refuses
    code = main(["eval", "--dataset", "hotpotqa", "--data-dir", str(data), "--methods", "dragin", "--limit", "1",
                 "--out", str(tmp_path / "out"), "--endpoint", "http://127.0.0.1:9/v1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "needs attention and a local model" in err


def test_cli_bench_through_the_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_endpoint(Script(tokens=ANSWER)) as (url, _):
        code = main(["bench", "--endpoint", url, "--prompts", "2", "--batch-sizes", "1,2", "--tokens", "12",
                     "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "| flare | 2 |" in out and (tmp_path / "bench-endpoint.json").is_file()


def test_answer_options_refuse_an_endpoint_at_construction() -> None:
    with fake_endpoint() as (url, script):
        lm = RemoteLM(url)
        for build in (lambda: ActiveRAG.from_preset("look-again-grounded", lm, TinyRetriever()),
                      lambda: ActiveRAG.from_preset("sr-rag", lm, TinyRetriever(), answer_options=True)):
            with pytest.raises(NeedsLocalModelError) as info:
                build()
            assert "answer_options" in _one_line(info.value) and "local model" in _one_line(info.value)
        assert ActiveRAG(lm, TinyRetriever(), **recipe("look-again")).answer_options is False
        assert not [r for r in script.requests if "prompt" in r or "messages" in r]
