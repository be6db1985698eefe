"""Griffe extension for the API reference: the docstrings' reStructuredText becomes Markdown that links.

The docstrings are written for Sphinx-style readers (``:class:`~active_rag.decoding.model.ActiveLM```,
``>>> ...  # doctest: +SKIP``, ``.. code-block:: python``); mkdocstrings renders Markdown, where those show as
text. When a package has been loaded (``on_package``), every docstring in it is rewritten before it is parsed;
the source files are never changed:

- ``:class:``, ``:func:``, ``:meth:``, ``:attr:``, ``:mod:``, ``:data:``, ``:exc:``, ``:obj:`` (and the
  ``:py:`` spellings, ``:const:``, ``:type:``) become a reference to the object they name when Griffe finds it.
  The text is the name as written, its last component with ``~``, or the title of ``title <target>``. The
  reference is an *optional* autoref (the form mkdocstrings-python gives signature annotations): a link when
  the object is rendered on some page of the site, plain code otherwise, so ``mkdocs build --strict`` never
  sees a broken link.
- A role whose target Griffe does not find (another library's object, a typo), one written ``!target``, and
  any other role (``:ref:``, ``:doc:``, ...) become plain code.
- Doctest blocks (``>>>`` lines and their output) become ``pycon`` code blocks without their doctest
  directives (``# doctest: +SKIP``); ``<BLANKLINE>`` becomes an empty line.
- ``.. code-block:: lang`` (``.. code::``, ``.. sourcecode::``) and its indented body become a fenced block.
- An ``Args:`` entry that names several parameters (``timeout, retries, backoff: ...``) becomes one entry per
  parameter, so that each appears in the parameter table.

Names resolve as Sphinx resolves them: from the documented object outwards (the object's members, its class,
its module, the enclosing packages; a module's imports count), then as a full path, then in the public API of
the package being documented and of the other packages named in the ``packages`` option, which are loaded
first when needed (``langchain_active_rag`` refers to ``active_rag``). A leading ``.`` skips the full-path
step. The identifier written in the reference is the object's canonical path (where it is defined); mkdocstrings
registers it for the page that renders the object under its public name.

Configured in mkdocs.yml: ``plugins.mkdocstrings.handlers.python.options.extensions``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import griffe

__all__ = ["SphinxRoles", "rewrite_docstring"]

Resolver = Callable[[str, str], "str | None"]

PY_ROLES = frozenset({
    "class", "func", "meth", "attr", "mod", "data", "exc", "obj", "const", "type",
    "function", "method", "attribute", "module", "exception",
})

# :role:`content` and :domain:role:`content`; the content may wrap onto the next line (explicit titles).
ROLE = re.compile(r"(?<![\w`]):(?:(?P<domain>[a-z]+):)?(?P<role>[a-z][a-z0-9_-]*):`(?P<content>[^`]+)`(?!`)")
_EXPLICIT = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)
DOCTEST_DIRECTIVE = re.compile(r"\s*#\s*doctest:\s*[+-][A-Z_]+(?:\s*,\s*[+-][A-Z_]+)*\s*$")
_PROMPT = re.compile(r"^(?P<indent>[ \t]*)>>>(?:[ \t]|$)")
_CONTINUATION = re.compile(r"^[ \t]*\.\.\.(?:[ \t]|$)")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_CODE_BLOCK = re.compile(r"^(?P<indent>[ \t]*)\.\.[ \t]+(?:code-block|code|sourcecode)::[ \t]*(?P<lang>[\w+-]*)[ \t]*$")
_SECTION = re.compile(r"^(?P<indent>[ \t]*)(?P<title>[A-Za-z][A-Za-z ]*):[ \t]*$")
_PARAMETER_SECTIONS = frozenset({
    "args", "arguments", "params", "parameters", "keyword args", "keyword arguments", "other args",
    "other arguments", "other params", "other parameters", "attributes",
})
_EXAMPLE_SECTIONS = frozenset({"example", "examples"})
_SEVERAL = re.compile(r"^(?P<names>\*{0,2}\w+(?:[ \t]*,[ \t]*\*{0,2}\w+)+)(?P<type>[ \t]*\([^)]*\))?:(?P<rest>.*)$")


# -- the rewriting, on text ----------------------------------------------------------------------------------
def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _code(text: str) -> str:
    text = " ".join(text.split())
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _shown(target: str, tilde: bool) -> str:
    if not tilde:
        return target
    suffix = "()" if target.endswith("()") else ""
    return target.removesuffix("()").rsplit(".", 1)[-1] + suffix


def rewrite_roles(text: str, resolve: Resolver) -> str:
    """``text`` (prose) with each Sphinx role replaced by a reference or by plain code."""

    def replace(match: re.Match[str]) -> str:
        domain, role, content = match["domain"], match["role"], match["content"]
        explicit = _EXPLICIT.match(content.strip())
        if explicit and explicit["title"]:
            title, target, tilde = explicit["title"], explicit["target"].strip(), False
        else:
            title, target = None, content.strip()
            tilde = target.startswith("~")
        target = target.lstrip("~")
        no_link = target.startswith("!")
        target = target.lstrip("!")
        shown = title if title is not None else _shown(target.lstrip("."), tilde)
        if domain not in (None, "py") or role not in PY_ROLES or no_link:
            return _code(shown)
        identifier = resolve(role, target.removesuffix("()"))
        if identifier is None:
            return _code(shown)
        return f'<autoref identifier="{html.escape(identifier)}" optional>{_code(shown)}</autoref>'

    return ROLE.sub(replace, text)


def _fenced(lang: str, body: list[str], indent: str) -> list[str]:
    while body and not body[-1].strip():
        body = body[:-1]
    return [f"{indent}```{lang}\n", *(f"{indent}{line}" if line.strip() else "\n" for line in body), f"{indent}```\n"]


def _split_entry(lines: list[str]) -> list[str]:
    """One ``a, b, c: text`` parameter entry (with its continuation lines) as one entry per name."""
    first = lines[0]
    indent = first[: _indent(first)]
    match = _SEVERAL.match(first.strip())
    if not match:
        return lines
    names = [name.strip() for name in match["names"].split(",")]
    kind = match["type"] or ""
    return [line for name in names for line in [f"{indent}{name}{kind}:{match['rest']}\n", *lines[1:]]]


def rewrite_docstring(text: str, resolve: Resolver) -> str:
    """The Markdown that mkdocstrings should render for the docstring ``text`` (see the module docstring).

    ``resolve(role, target) -> identifier | None`` gives the identifier of the object a role names.
    """
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    out: list[str] = []
    prose: list[str] = []

    def flush() -> None:
        out.append(rewrite_roles("".join(prose), resolve))
        prose.clear()

    def blank_line_before(indent: str) -> None:
        """A fence right after a paragraph needs a blank line in between (not after a section's title)."""
        done = "".join(out)
        last = done.rstrip("\n").rpartition("\n")[2]
        if done.endswith("\n") and not done.endswith("\n\n") and _indent(last) >= len(indent):
            out.append("\n")

    section: tuple[str, int] | None = None  # (title, indent) of the Google-style section we are in
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = _indent(line)
        if line.strip() and section and indent <= section[1]:
            section = None
        if (m := _SECTION.match(line)) and (i + 1 < len(lines) and _indent(lines[i + 1]) > indent):
            section = (m["title"].strip().lower(), indent)
        if _FENCE.match(line):  # a Markdown fence: kept as it is, up to its end
            flush()
            opener = _FENCE.match(line).group(1)
            out.append(line)
            i += 1
            while i < len(lines):
                out.append(lines[i])
                i += 1
                if lines[i - 1].strip().startswith(opener):
                    break
            continue
        if m := _CODE_BLOCK.match(line):  # .. code-block:: lang, then its indented body
            flush()
            j = i + 1
            body: list[str] = []
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > indent):
                body.append(lines[j])
                j += 1
            content = [b for b in body if b.strip()]
            if content:
                cut = min(_indent(b) for b in content)
                body = [b[cut:] if b.strip() else "\n" for b in body]
                while body and not body[0].strip():
                    body = body[1:]
                blank_line_before(m["indent"])
                out.extend(_fenced(m["lang"], body, m["indent"]))
                out.append("\n")
                i = j
                continue
            out.append(line)
            i += 1
            continue
        if (m := _PROMPT.match(line)) and not (section and section[0] in _EXAMPLE_SECTIONS):
            flush()  # a doctest block: up to the next blank line (or a line indented less)
            j = i
            body = []
            while j < len(lines) and lines[j].strip() and _indent(lines[j]) >= len(m["indent"]):
                body.append(lines[j][len(m["indent"]):])
                j += 1
            body = [DOCTEST_DIRECTIVE.sub("", b.rstrip("\r\n")) + "\n" if (_PROMPT.match(b) or _CONTINUATION.match(b))
                    else ("\n" if b.strip() == "<BLANKLINE>" else b) for b in body]
            blank_line_before(m["indent"])
            out.extend(_fenced("pycon", body, m["indent"]))
            i = j
            continue
        if _PROMPT.match(line) or _CONTINUATION.match(line):  # a doctest inside Examples: directives only
            prose.append(DOCTEST_DIRECTIVE.sub("", line.rstrip("\r\n")) + "\n")
            i += 1
            continue
        if section and section[0] in _PARAMETER_SECTIONS and line.strip() and _SEVERAL.match(line.strip()):
            j = i + 1
            while j < len(lines) and lines[j].strip() and _indent(lines[j]) > indent:
                j += 1
            prose.extend(_split_entry(lines[i:j]))
            i = j
            continue
        prose.append(line)
        i += 1
    flush()
    result = "".join(out)
    return result if text.endswith("\n") else result.rstrip("\n")


# -- the extension -------------------------------------------------------------------------------------------
class SphinxRoles(griffe.Extension):
    """Rewrites every docstring of each loaded package (see the module docstring).

    ``packages``: the top-level packages whose public API resolves bare names; they are loaded before the
    docstrings are rewritten (default: the documented package alone).
    """

    def __init__(self, packages: Sequence[str] = ()) -> None:
        super().__init__()
        self.packages = list(packages)
        self._done: set[int] = set()

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        collection = loader.modules_collection
        for name in self.packages:
            if name not in collection:
                try:
                    loader.load(name, try_relative_path=False)
                except Exception:  # noqa: BLE001 - a package that does not load resolves nothing
                    continue
        for obj in _objects(pkg):
            docstring = obj.docstring
            if docstring is None or id(docstring) in self._done:
                continue
            self._done.add(id(docstring))
            new = rewrite_docstring(docstring.value, lambda role, target, obj=obj: self.resolve(obj, target, collection))
            if new != docstring.value:
                docstring.value = new
                docstring.__dict__.pop("parsed", None)  # in case something parsed it already

    def resolve(self, obj: griffe.Object, target: str, collection: Any) -> str | None:
        """The canonical path of the object that ``target`` names in ``obj``'s docstring, or ``None``."""
        relative = target.startswith(".")
        name = target.lstrip(".")
        if not name:
            return None
        candidates: list[str] = []
        scope: Any = obj
        while scope is not None:  # the object's members, its class, module, enclosing packages
            candidates.append(f"{scope.path}.{name}")
            scope = scope.parent
        if not relative:
            candidates.append(name)
        packages = [obj.package.path, *(p for p in self.packages if p != obj.package.path)]
        candidates += [f"{package}.{name}" for package in packages]
        for candidate in dict.fromkeys(candidates):
            found = _lookup(collection, candidate)
            if found is not None:
                return found
        return None


def _lookup(collection: Any, path: str) -> str | None:
    if path.split(".", 1)[0] not in collection:
        return None
    for getter in (collection.get_member, collection.__getitem__):  # declared members, then inherited ones
        try:
            found = getter(path)
            return found.final_target.path if found.is_alias else found.path
        except Exception:  # noqa: BLE001 - not found, or an alias into a package that is not loaded
            continue
    return None


def _objects(root: griffe.Object) -> Iterator[griffe.Object]:
    yield root
    for member in list(root.members.values()):
        if not member.is_alias:
            yield from _objects(member)
