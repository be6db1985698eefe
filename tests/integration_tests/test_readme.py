"""The README's example on the bundled corpus (## Python) runs as written, on SmolLM2 instead of the
qwen2.5-coder-0.5b that ``make demo`` installs (the only change: the model name), and shows a trace. The examples on
a folder of the user's own, LangChain and LlamaIndex among them, run in :mod:`test_readme_folder`."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = dict(re.findall(r"^## (Python)\n\n```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.M | re.S))


def test_the_readme_has_the_bundled_corpus_example() -> None:
    assert sorted(BLOCKS) == ["Python"]
    assert all('ActiveLM.load("qwen2.5-coder-0.5b")' in code for code in BLOCKS.values())


@pytest.mark.parametrize("name", ["Python"])
def test_a_readme_example_runs_as_written(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = BLOCKS[name].replace('ActiveLM.load("qwen2.5-coder-0.5b")', 'ActiveLM.load("smollm2")')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, f"README.md ({name})", "exec"), {"__name__": "readme"})  # noqa: S102 - the README's own code
    ours = [str(w.message) for w in caught if "active_rag" in (w.filename or "") or "active_rag" in str(w.message)]
    assert not ours, ours  # a newcomer's first run prints no warning of ours
    out = capsys.readouterr().out
    assert "Kasper Schmeichel" in out  # the first retrieval's titles (Python: the trace; the others: sources)
