"""The documentation: the README stays short, every relative link resolves, and the MkDocs site builds in
strict mode (broken links, missing anchors and docstring warnings fail it)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 220  # the home page: what a newcomer needs; evidence lives in docs/

_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^()\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _markdown_files() -> list[Path]:
    """README, the docs and every other Markdown file of the repository (results' and research's READMEs, the
    notebooks' and integrations' pages): none is left with a link to a file that is not there."""
    skip = {"_hooks", "site", "node_modules", "build", "dist"}
    others = sorted(p for p in ROOT.rglob("*.md")
                    if p != README and not any(part in skip or part.startswith(".") for part in p.relative_to(ROOT).parts))
    return [README, *others]


def _relative_links(path: Path) -> list[str]:
    """Link targets outside fenced code blocks that are relative paths (no scheme, not a bare #anchor)."""
    links: list[str] = []
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in _LINK.findall(line):
            if target.startswith(("#", "/", "mailto:")) or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue
            links.append(target)
    return links


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move details into docs/ (at most {MAX_README_LINES})"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(path: Path) -> None:
    links = _relative_links(path)
    missing = [t for t in links if not (path.parent / t.partition("#")[0]).exists()]
    assert not missing, f"{path.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_readme_links_reach_the_docs_pages() -> None:
    linked = {t.partition("#")[0] for t in _relative_links(README)}
    for page in ("api", "evaluation", "speed", "scaling", "fidelity", "context", "weights", "engine_api", "recipes", "endpoint"):
        assert f"docs/{page}.md" in linked, f"README.md does not link docs/{page}.md"


_DOCS_MODULES = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
_PACKAGES = ("active_rag", "langchain_active_rag", "llamaindex_active_rag")
_EXTENSION = DOCS / "_ext" / "griffe_roles.py"
# What a Sphinx role or a doctest directive looks like once rendered as text (the backticks become <code>).
_ROLE_TEXT = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):(?:`|<code>)")
_DOCTEST_TEXT = re.compile(r"doctest:\s*[+-]|<BLANKLINE>|\.\. code-block::")
# A reference written as a role: an autorefs link whose text is code (annotation links have no <code> inside).
_ROLE_LINK = re.compile(r'<a class="autorefs autorefs-internal"[^>]*href="([^"]*)"[^>]*><code>([^<]*)</code></a>')


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module with ``mkdocs build --strict``."""
    missing = [m for m in _DOCS_MODULES if _absent(m)]
    if missing:
        pytest.skip(f"the docs extra is not installed ({', '.join(missing)} not importable): pip install -e '.[docs]'")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1"}
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return site


def _reference_pages(site: Path) -> dict[str, str]:
    """The API pages' article HTML (the page around it holds the navigation and the search index)."""
    pages = {}
    for page in sorted((site / "reference").glob("*/index.html")):
        html = page.read_text(encoding="utf-8")
        start, end = html.find("<article"), html.find("</article>")
        pages[page.parent.name] = html[start:end]
    return pages


@pytest.mark.slow
def test_mkdocs_build_is_strict_clean(site: Path) -> None:
    assert (site / "index.html").is_file()
    for page in ("api", "evaluation", "speed", "scaling", "fidelity", "reference/active_rag", "reference/langchain"):
        assert (site / page / "index.html").is_file(), page
    # The API pages are generated from the docstrings, not left empty.
    reference = (site / "reference" / "active_rag" / "index.html").read_text(encoding="utf-8")
    assert 'id="active_rag.ActiveRAG"' in reference and 'id="active_rag.BM25Index"' in reference
    triggers = (site / "reference" / "triggers" / "index.html").read_text(encoding="utf-8")
    assert 'id="active_rag.components.triggers.RindTrigger"' in triggers


@pytest.mark.slow
def test_reference_pages_show_no_sphinx_markup(site: Path) -> None:
    """docs/_ext/griffe_roles.py rewrites the roles, doctest directives and code-block directives of every
    docstring: none reaches an API page as text, and no reference is left unprocessed."""
    pages = _reference_pages(site)
    assert len(pages) >= 9, sorted(pages)
    for name, html in pages.items():
        roles = sorted(set(m.group(0) for m in _ROLE_TEXT.finditer(html)))
        assert not roles, f"reference/{name}: Sphinx roles rendered as text: {roles}"
        directives = sorted(set(m.group(0) for m in _DOCTEST_TEXT.finditer(html)))
        assert not directives, f"reference/{name}: doctest or reST directives rendered as text: {directives}"
        assert "<autoref" not in html, f"reference/{name}: a cross-reference was left unresolved"
        assert "<blockquote>" not in html, f"reference/{name}: a doctest block rendered as a quote, not as code"


@pytest.mark.slow
def test_reference_roles_become_links_to_rendered_objects(site: Path) -> None:
    pages = _reference_pages(site)
    # A known one: the LangChain page names :class:`active_rag.ActiveLM`, documented on the engine's page.
    links = {(href, text) for href, text in _ROLE_LINK.findall(pages["langchain"])}
    assert ("../active_rag/#active_rag.ActiveLM", "active_rag.ActiveLM") in links, sorted(links)[:20]
    # `~` shows the last component: :class:`~langchain_active_rag.ChatActiveHF` on its own page.
    assert ("#langchain_active_rag.ChatActiveHF", "ChatActiveHF") in links, sorted(links)[:20]
    # Every such link lands on an anchor that exists, on this page or another.
    anchors = {name: set(re.findall(r'id="([^"]+)"', html)) for name, html in pages.items()}
    count = 0
    for name, html in pages.items():
        for href, text in _ROLE_LINK.findall(html):
            path, _, anchor = href.partition("#")
            target = name if not path else path.strip("./").split("/")[-1]
            assert target in anchors and anchor in anchors[target], f"reference/{name}: {text} links to {href}"
            count += 1
    assert count >= 80, f"only {count} cross-references became links"


# -- the Griffe extension on its own (no MkDocs build) ---------------------------------------------------------
def _griffe_roles():
    if _absent("griffe"):
        pytest.skip("griffe (the docs extra) is not installed: pip install -e '.[docs]'")
    spec = importlib.util.spec_from_file_location("griffe_roles", _EXTENSION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_griffe_roles_rewrites_a_docstring() -> None:
    roles = _griffe_roles()
    known = {"Engine": "pkg.engine.Engine", "pkg.engine.Engine.run": "pkg.engine.Engine.run", "run": "pkg.engine.Engine.run"}
    text = (
        "Use :class:`Engine` or :class:`~pkg.engine.Engine.run`, :meth:`the runner <run>`, :mod:`!os` and\n"
        ":class:`TextNode` (elsewhere); :ref:`intro`.\n"
        "\n"
        ">>> Engine().run()  # doctest: +SKIP\n"
        "'answer'\n"
        "\n"
        "Args:\n"
        "    timeout, retries: see :class:`Engine`.\n"
        "\n"
        ".. code-block:: bash\n"
        "\n"
        "    pip install pkg\n"
    )
    out = roles.rewrite_docstring(text, lambda role, target: known.get(target))
    assert '<autoref identifier="pkg.engine.Engine" optional>`Engine`</autoref>' in out
    assert '<autoref identifier="pkg.engine.Engine.run" optional>`run`</autoref>' in out  # ~: last component
    assert '<autoref identifier="pkg.engine.Engine.run" optional>`the runner`</autoref>' in out  # explicit title
    assert "`os`" in out and "`TextNode`" in out and "`intro`" in out  # no link, not found, not a Python role
    assert "```pycon\n>>> Engine().run()\n'answer'\n```" in out
    assert "    timeout: see <autoref" in out and "    retries: see <autoref" in out
    assert "```bash\npip install pkg\n```" in out
    assert not _ROLE_TEXT.search(out.replace("`", "<code>")) and "doctest" not in out and "code-block" not in out


@pytest.mark.slow
def test_griffe_roles_resolves_the_packages_names() -> None:
    """The extension on the packages as mkdocstrings loads them: every docstring loses its roles and doctest
    directives; bare names, module-scoped and cross-package names resolve to where the object is defined."""
    roles = _griffe_roles()
    import griffe

    extension = roles.SphinxRoles(packages=list(_PACKAGES))
    loader = griffe.GriffeLoader(extensions=griffe.load_extensions(extension), search_paths=[str(ROOT)])
    loader.load("langchain_active_rag")  # loads the other two first: it names their objects
    collection = loader.modules_collection
    assert all(name in collection for name in _PACKAGES)
    left = []
    for name in _PACKAGES:
        for obj in roles._objects(collection[name]):
            value = obj.docstring.value if obj.docstring else ""
            if roles.ROLE.search(value) or re.search(r"#\s*doctest:", value):  # (a role inside ``...`` stays)
                left.append(obj.path)
    assert not left, f"docstrings still with Sphinx roles or doctest directives: {left[:10]}"
    chain = collection["langchain_active_rag.chain"]
    resolve = lambda target: extension.resolve(chain, target, collection)  # noqa: E731
    assert resolve("active_rag.ActiveLM") == "active_rag.decoding.model.ActiveLM"  # a public name, to its definition
    assert resolve("ChatActiveHF") == "langchain_active_rag.chat_models.ChatActiveHF"  # the package's public API
    assert resolve("ActiveRAG.as_configurable") == "langchain_active_rag.chain.ActiveRAG.as_configurable"  # module scope
    assert resolve("BM25Index") == "active_rag.retrieval.bm25.BM25Index"  # another package's public API
    assert resolve("no_such_name") is None and resolve("langchain_core.runnables.AddableDict") is None


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True
