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


def test_the_modules_old_paths_still_import() -> None:
    """The modules moved into subpackages keep their old paths: a moved module is the same module object under both
    names, and the packages named like the old modules re-export their public names."""
    import importlib

    import active_rag
    from active_rag import _MOVED

    for old, new in _MOVED.items():
        assert importlib.import_module(f"active_rag.{old}") is importlib.import_module(f"active_rag.{new}"), old
    from active_rag.context import make_context
    from active_rag.embeddings import ephemeral_chroma_client  # noqa: F401
    from active_rag.linked import follow_links  # noqa: F401
    from active_rag.presets import PRESETS
    from active_rag.remote import RemoteLM
    from active_rag.retrieval import BM25Index, demo_corpus_path, read_jsonl_passages  # noqa: F401
    from active_rag.routing import make_router  # noqa: F401
    from active_rag.viz import plot_token_signals, token_signal_table  # noqa: F401

    assert make_context is active_rag.methods.context.make_context and PRESETS is active_rag.PRESETS
    assert RemoteLM is active_rag.RemoteLM and BM25Index is active_rag.BM25Index
    assert callable(importlib.import_module("active_rag.cli").main)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("active_rag.no_such_module")
