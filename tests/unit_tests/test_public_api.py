"""Every public name (``__all__``) of the three packages imports, and optional extras fail with a clear error."""

from __future__ import annotations

import importlib
import sys

import pytest

PACKAGES = ["active_rag", "langchain_active_rag", "llamaindex_active_rag"]
OPTIONAL = {"langchain_active_rag": "langchain_core", "llamaindex_active_rag": "llama_index.core"}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_imports(package: str) -> None:
    if package in OPTIONAL:
        pytest.importorskip(OPTIONAL[package])
    module = importlib.import_module(package)
    names = list(module.__all__)
    assert names and len(names) == len(set(names)), f"{package}.__all__ is empty or has duplicates"
    missing = [name for name in names if getattr(module, name, None) is None]
    assert not missing, f"{package}.__all__ names that do not import: {missing}"
    # `from package import *` gives exactly the public names
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    assert set(names) <= set(namespace)


def test_unknown_name_is_an_attribute_error() -> None:
    import active_rag

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        active_rag.Nope  # noqa: B018


def test_plots_without_matplotlib_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from active_rag import viz
    from active_rag._optional import MissingDependencyError
    from active_rag.errors import ActiveRAGError
    from active_rag.evaluation import plots
    from active_rag.types import ActiveRAGResult

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError; find_spec -> ValueError
    result = ActiveRAGResult(question="q", answer="a", method="wo-rag")
    with pytest.raises(MissingDependencyError, match=r"active-rag\[plot\]") as info:
        viz.plot_retrieval_timeline(result)
    assert isinstance(info.value, ImportError) and isinstance(info.value, ActiveRAGError)
    with pytest.raises(MissingDependencyError, match=r"evaluation plots needs matplotlib"):
        plots.plot_methods({"wo-rag": {"em": 0.5}}, "unused.png")


def test_the_subpackages_public_names_import() -> None:
    """The packages' public faces the docs, notebooks and integrations use: the remote model, the index and the demo
    data, the plots and the command line's entry point (``active-rag = active_rag.cli:main``)."""
    import active_rag
    from active_rag.cli import main
    from active_rag.remote import RemoteLM
    from active_rag.retrieval import BM25Index, demo_corpus_path, read_jsonl_passages  # noqa: F401
    from active_rag.viz import plot_token_signals, token_signal_table  # noqa: F401

    assert RemoteLM is active_rag.RemoteLM and BM25Index is active_rag.BM25Index and callable(main)


@pytest.mark.parametrize("old", ["context", "linked", "presets", "routing", "embeddings", "registry", "model"])
def test_the_modules_flat_paths_from_before_the_subpackages_do_not_import(old: str) -> None:
    """A module lives at one path: ``active_rag.components.context``, never ``active_rag.context``."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"active_rag.{old}")
