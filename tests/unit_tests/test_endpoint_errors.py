"""Endpoint failures and misreadings that used to escape as tracebacks or read wrong: a server that does not speak
HTTP, a reply cut short, a broken chunked stream, an invalid URL, a character split over streamed events,
``max_retries=0``, and methods that need a local model (``answer_options``) on ``eval`` / ``ask --endpoint``."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from active_rag.cli.commands import main
from active_rag.errors import EndpointError, InvalidOptionError
from active_rag.remote.lm import RemoteLM
from active_rag.remote.clients import remote_from_client
from active_rag.remote.http import resolve_base_url
from endpoint_fakes import Script, fake_endpoint

ANSWER = ["Paris", " is", " in", " France", ".", " So", " the", " answer", " is", " Paris", "."]


@contextmanager
def raw_server(reply: bytes) -> Iterator[str]:
    """A server on a local port that reads each request and answers ``reply``, byte for byte, then closes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(2)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = re.search(rb"content-length: *(\d+)", head, re.I)
                while length and len(body) < int(length.group(1)):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


_EVENT = {"choices": [{"text": "Paris", "finish_reason": None,
                       "logprobs": {"tokens": ["Paris"], "token_logprobs": [-0.1], "top_logprobs": [{"Paris": -0.1}]}}]}
REPLIES = {
    "not http": b"SSH-2.0-OpenSSH_8.9\r\n",
    "short body": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"choices\": [",
    "broken chunks": (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                      + f"{len(line := ('data: ' + json.dumps(_EVENT) + chr(10) + chr(10)).encode()):x}\r\n".encode()
                      + line + b"\r\nfff\r\ndata: {\"cho"),
}
NEEDLES = {"not http": "did not answer HTTP (BadStatusLine", "short body": "cut its reply short",
           "broken chunks": "cut its reply short"}


@pytest.mark.parametrize("case", list(REPLIES))
@pytest.mark.parametrize("stream", [True, False])
def test_a_broken_reply_is_a_typed_one_line_error(case: str, stream: bool) -> None:
    with raw_server(REPLIES[case]) as url:
        lm = RemoteLM(url, model="m", retries=0, timeout=5, stream=stream)
        with pytest.raises(EndpointError) as info:
            lm.complete("q", max_new_tokens=4)
    message = str(info.value)
    assert "\n" not in message and url in message and NEEDLES[case] in message


@pytest.mark.parametrize("case", ["not http", "short body"])
def test_cli_a_broken_reply_exits_2_in_one_line(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    with raw_server(REPLIES[case]) as url:
        code = main(["ask", "Where is Paris?", "--method", "wo-rag", "--endpoint", url, "--endpoint-model", "m"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and NEEDLES[case] in err, err


@pytest.mark.parametrize("url, needle", [("http://[::1", "is not a valid URL (Invalid IPv6 URL)"),
                                         ("http://:8080/v1", "names no host")])
def test_an_invalid_url_is_a_typed_error(url: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidOptionError, match=re.escape(needle)):
        resolve_base_url(url)
    assert main(["ask", "Where is Paris?", "--method", "wo-rag", "--endpoint", url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def _chat_event(token_bytes: list[int], content: str, finish: str | None) -> dict[str, Any]:
    item = {"token": "bytes:" + "".join(f"\\x{b:02x}" for b in token_bytes), "logprob": -0.1, "bytes": token_bytes,
            "top_logprobs": []}
    return {"choices": [{"delta": {"content": content}, "logprobs": {"content": [item]}, "finish_reason": finish}]}


def test_a_character_split_over_streamed_events_is_decoded_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    lm = RemoteLM("http://127.0.0.1:9/v1", model="m", api="chat")
    first, second = "é".encode()  # one token a byte, as byte-level tokenizers cut it; a server sends no text for
    events = [_chat_event(list(b"caf"), "caf", None),  # the first byte alone (llama.cpp holds it back)
              _chat_event([first], "", None), _chat_event([second], "é", None), _chat_event(list(b" ok"), " ok", "stop")]
    monkeypatch.setattr(lm.client, "post_stream", lambda path, body: iter(events))
    assert "".join(step.text for step in lm.stream("q", max_new_tokens=8)) == "café ok"


class ChatOpenAI:
    """What remote_from_client reads of langchain_openai's ChatOpenAI."""

    def __init__(self, max_retries: int | None) -> None:
        self.openai_api_base = "http://127.0.0.1:9/v1"
        self.model_name = "m"
        self.logprobs = True
        self.max_retries = max_retries


@pytest.mark.parametrize("given, retries", [(0, 0), (5, 5), (None, 2)])
def test_max_retries_of_a_client_is_honoured(given: int | None, retries: int) -> None:
    assert remote_from_client(ChatOpenAI(given)).client.retries == retries


# -- methods that need a local model ------------------------------------------------------------------------
def _hotpot(root: Path) -> Path:
    rows = [{"question_id": "q0", "question_text": "Where is Paris?", "answers_objects": [{"spans": ["France"]}],
             "contexts": [{"id": "0", "title": "Paris", "paragraph_text": "Paris is in France.", "is_supporting": True}]}]
    (root / "hotpotqa").mkdir(parents=True)
    (root / "hotpotqa/questions_dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (root / "hotpotqa/corpus.jsonl").write_text(json.dumps({"id": "p1", "title": "Paris", "text": "Paris is in France."})
                                                + "\n", encoding="utf-8")
    return root


def test_eval_endpoint_default_methods_leave_out_those_that_need_a_local_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from active_rag.evaluation import runner
    from active_rag.components.presets import PRESETS

    ran: list[str] = []

    def fake_run_eval(config: Any, lm: Any = None, progress: bool = True) -> Any:
        ran.extend(config.methods)
        raise KeyboardInterrupt  # nothing to run: the method list is what is checked

    monkeypatch.setattr(runner, "run_eval", fake_run_eval)
    with fake_endpoint() as (url, _):
        main(["eval", "--dataset", "hotpotqa", "--data-dir", str(_hotpot(tmp_path / "data")), "--out",
              str(tmp_path / "out"), "--endpoint", url, "--no-plots", "--no-progress"])
    assert "flare" in ran and "sr-rag" in ran and "dragin" not in ran
    assert not [m for m in ran if PRESETS[m].answer.options]


@pytest.mark.parametrize("argv, needle", [
    (["--methods", "sr-rag,look-again-grounded"], "Method 'look-again-grounded' answers a choice question"),
    (["--methods", "sr-rag", "--answer-options"], "--answer-options masks the model's logits"),
])
def test_eval_endpoint_refuses_a_named_method_that_needs_a_local_model(
        argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", "--dataset", "hotpotqa", "--data-dir", str(_hotpot(tmp_path / "data")), "--out",
                 str(tmp_path / "out"), "--endpoint", "http://127.0.0.1:9/v1", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_ask_endpoint_options_method_answers_a_question_without_options(corpus: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with fake_endpoint(Script(tokens=ANSWER)) as (url, _):
        code = main(["ask", "Who is Kasper Schmeichel?", "--method", "sr-rag-linked", "--corpus", str(corpus),
                     "--endpoint", url, "--max-new-tokens", "16"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Answer:   Paris is in France." in captured.out


def test_ask_endpoint_options_method_on_a_choice_question_names_the_fixes(
        corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    question = "Who is older, Kasper Schmeichel or Peter Schmeichel?"
    args = ["ask", question, "--method", "sr-rag-linked", "--corpus", str(corpus), "--max-new-tokens", "16"]
    assert main([*args, "--endpoint", "http://127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'Kasper Schmeichel' or 'Peter Schmeichel'" in err
    assert "Drop --endpoint" in err and "--no-answer-options" in err
    with fake_endpoint(Script(tokens=ANSWER)) as (url, _):  # the fix it names works
        assert main([*args, "--endpoint", url, "--no-answer-options"]) == 0
    assert "Answer:   Paris is in France." in capsys.readouterr().out
