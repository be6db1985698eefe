"""The README's three examples (Python, LangChain, LlamaIndex) run as written, on SmolLM2 instead of the
qwen2.5-coder-0.5b that ``make demo`` installs (the only change: the model name), and each shows a trace."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = dict(re.findall(r"^## (Python|LangChain|LlamaIndex)\n\n```python\n(.*?)```", (ROOT / "README.md").read_text(),
                         flags=re.M | re.S))
NEEDS = {"LangChain": "langchain_active_rag", "LlamaIndex": "llama_index.retrievers.bm25"}


def test_the_readme_has_the_three_examples() -> None:
    assert sorted(BLOCKS) == ["LangChain", "LlamaIndex", "Python"]
    assert all('ActiveLM.load("qwen2.5-coder-0.5b")' in code for code in BLOCKS.values())


@pytest.mark.parametrize("name", ["Python", "LangChain", "LlamaIndex"])
def test_a_readme_example_runs_as_written(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    code = BLOCKS[name].replace('ActiveLM.load("qwen2.5-coder-0.5b")', 'ActiveLM.load("smollm2")')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, f"README.md ({name})", "exec"), {"__name__": "readme"})  # noqa: S102 - the README's own code
    ours = [str(w.message) for w in caught if "active_rag" in (w.filename or "") or "active_rag" in str(w.message)]
    assert not ours, ours  # a newcomer's first run prints no warning of ours
    out = capsys.readouterr().out
    assert "Kasper Schmeichel" in out  # the first retrieval's titles (Python: the trace; the others: sources)
