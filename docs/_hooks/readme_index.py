"""MkDocs hook: the site's home page is README.md, and links to repository files outside docs/ keep working.

- ``on_files`` adds ``index.md`` generated from ``README.md``: links into ``docs/`` lose that prefix, so
  they point at the pages of the site.
- Links to repository files outside ``docs/`` (``integrations/*.py``, ``notebooks/*.ipynb``, ``LICENSE``, from
  the README or as ``../`` links from a docs page) point at ``repo_url`` when mkdocs.yml sets one; otherwise
  the file is copied into the site under ``repo/`` and linked there (a Markdown file outside ``docs/`` would
  become a page of its own, so those links keep their text and lose the link).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

_LINK = re.compile(r"(!?\[[^\]\n]*\])\(([^()\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")
_COPIED = "repo"


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def _is_relative(target: str) -> bool:
    return not (target.startswith(("#", "/", "mailto:")) or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target))


def _rewrite(markdown: str, resolve) -> str:
    """Apply ``resolve(text, target) -> replacement`` to every Markdown link outside fenced code blocks."""
    out, fenced = [], False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        if not fenced:
            line = _LINK.sub(lambda m: resolve(m.group(1), m.group(2)) if _is_relative(m.group(2)) else m.group(0), line)
        out.append(line)
    return "".join(out)


def _outside(text: str, repo_path: str, depth: int, config, files: Files) -> str:
    """The link for a repository file outside docs/, from a page ``depth`` folders below the site root."""
    path, _, anchor = repo_path.partition("#")
    if config.repo_url:
        url = f"{config.repo_url.rstrip('/')}/blob/main/{path}" + (f"#{anchor}" if anchor else "")
        return f"{text}({url})"
    if path.endswith(".md") or not (_root(config) / path).is_file():
        return text[1:-1] if not text.startswith("!") else text  # keep the words, drop the link
    uri = f"{_COPIED}/{path}"
    if files.get_file_from_path(uri) is None:
        files.append(File.generated(config, uri, abs_src_path=str(_root(config) / path), inclusion=InclusionLevel.NOT_IN_NAV))
    return f"{text}({'../' * depth}{uri})"


def on_files(files: Files, config) -> Files:
    for file in list(files.documentation_pages()):  # copy the outside files the pages link to, before rendering
        if file.abs_src_path is not None:
            _rewrite_page(Path(file.abs_src_path).read_text(encoding="utf-8"), file.src_uri, config, files)
    readme = (_root(config) / "README.md").read_text(encoding="utf-8")

    def resolve(text: str, target: str) -> str:
        if target.startswith("docs/"):
            return f"{text}({target[len('docs/'):]})"
        return _outside(text, target, 0, config, files)

    files.append(File.generated(config, "index.md", content=_rewrite(readme, resolve)))
    return files


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    if page.file.abs_src_path is None:  # the generated index.md: rewritten in on_files
        return markdown
    return _rewrite_page(markdown, page.file.src_uri, config, files)


def _rewrite_page(markdown: str, src_uri: str, config, files: Files) -> str:
    docs_dir = Path(config.docs_dir).resolve()
    page_dir = posixpath.dirname(src_uri)
    depth = len(Path(src_uri).parts) - 1

    def resolve(text: str, target: str) -> str:
        path, _, anchor = target.partition("#")
        if not path:
            return f"{text}({target})"
        on_disk = (docs_dir / page_dir / path).resolve()
        if on_disk.is_relative_to(docs_dir):
            return f"{text}({target})"
        repo_path = on_disk.relative_to(_root(config)).as_posix() + (f"#{anchor}" if anchor else "")
        return _outside(text, repo_path, depth, config, files)

    return _rewrite(markdown, resolve)
