"""A second documentation folder, of packages pydocs does not hold, with questions of pydocs' seven types.

The rules of the engine's default were chosen on pydocs (``../shared/data/pydocs``). This script builds a folder of the
same kind from other packages, so that the default can be checked on documents it was not tuned on:

    python research/pydocs_fresh.py fetch --out research/data/pydocs-fresh      # METADATA from PyPI (PEP 658)
    python research/pydocs_fresh.py questions --out research/data/pydocs-fresh --per-type 20
    active-rag eval --dataset pydocs --data-dir research/data/pydocs-fresh ...

``fetch`` reads, for each seed package (:data:`SEEDS`) and then the packages their headers require (breadth first,
until ``--limit`` files), the METADATA of the newest release's wheel as PyPI serves it (``<wheel url>.metadata``), and
writes it as pydocs writes a file: a ``# name version`` line, the header fields other than ``Metadata-Version``,
``Classifier``, ``Description-Content-Type``, ``License-File`` and ``Dynamic`` (each line ending in two spaces, a
continued value joined by spaces), then the long description. A package pydocs holds is never fetched or written,
so no file of this folder is in pydocs. ``questions`` writes ``questions_dev.jsonl`` from the headers with pydocs'
seven templates (the field rules are ``research/pydocs_heldout.py``'s), ``--per-type`` of each, drawn with ``--seed``:
``author``, ``python``, ``license``, ``dep-author``, ``dep-python``, ``compare-python`` (two packages whose minimum
Pythons differ; the gold is the newer's name) and ``same-author`` (half ``yes``: two packages with one author).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from research.pydocs_heldout import author, dependencies, header, key, min_python  # noqa: E402

SEEDS = """flask django werkzeug itsdangerous blinker celery kombu billiard vine amqp redis alembic mako pymysql boto3 botocore
s3transfer jmespath grpcio-status google-cloud-storage google-cloud-core google-resumable-media google-crc32c cachetools rsa
scipy pandas seaborn scikit-learn threadpoolctl statsmodels patsy pytest-mock pytest-xdist execnet pytest-timeout
hypothesis sortedcontainers coverage tox black isort flake8 pyflakes pycodestyle mccabe pylint astroid tomlkit mypy ruff
bandit stevedore pbr gunicorn python-multipart email-validator dnspython boltons cattrs toolz cytoolz more-itertools zipp
importlib-metadata arrow pendulum pytz tzlocal paramiko pynacl invoke fabric scp docutils sphinx alabaster imagesize
snowballstemmer sphinxcontrib-applehelp sphinxcontrib-devhelp sphinxcontrib-htmlhelp sphinxcontrib-jsmath
sphinxcontrib-qthelp sphinxcontrib-serializinghtml beautifulsoup4 soupsieve lxml html5lib webencodings bleach cssselect
click-plugins cligj fiona shapely pyproj affine snuggs mock freezegun responses requests-mock ujson simplejson cbor2
ruamel-yaml toml tabulate prettytable termcolor blessed rich-click humanize xlrd openpyxl et-xmlfile xlsxwriter
python-docx decorator future dask distributed partd locket zict tblib numba llvmlite numexpr tables bottleneck
sentry-sdk structlog loguru retrying backoff pyjwt passlib python-jose ecdsa docker apscheduler schedule croniter
pyramid waitress webob zope-interface zope-event gevent greenlet eventlet twisted automat constantly hyperlink incremental
service-identity pyopenssl treq falcon bottle cherrypy cheroot jaraco-functools jaraco-text jaraco-collections tempora
portend sqlparse djangorestframework django-filter django-cors-headers django-extensions channels daphne peewee
aiosqlite asyncpg psycopg motor pymongo mongoengine cassandra-driver elasticsearch opensearch-py kafka-python pika
aio-pika nats-py scrapy parsel w3lib itemadapter itemloaders queuelib protego tldextract requests-file selenium trio
trio-websocket outcome wsproto mutagen imageio scikit-image tifffile pywavelets gensim smart-open textblob langdetect
flask-sqlalchemy flask-login flask-wtf wtforms flask-cors flask-migrate plotly dash bokeh altair panel param holoviews
xarray netcdf4 cftime h5py zarr numcodecs polars pyarrow duckdb docopt fire plac cliff cmd2 semver bump2version
setuptools-scm hatchling flit-core poetry-core keyring jeepney secretstorage pyserial pyusb""".split()
"""Packages from many corners of PyPI (web, cloud, science, testing, linting, docs, data, serialisation)."""

DROPPED = ("Metadata-Version", "Classifier", "Description-Content-Type", "License-File", "Dynamic")
_USER_AGENT = "active-rag research/pydocs_fresh.py"


def _get(url: str, accept: str | None = None, tries: int = 3) -> bytes:
    headers = {"User-Agent": _USER_AGENT, **({"Accept": accept} if accept else {})}
    for attempt in range(tries):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=20) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            if error.code == 404 or attempt == tries - 1:
                raise
        except OSError:
            if attempt == tries - 1:
                raise
        time.sleep(1 + attempt)
    raise AssertionError("unreachable")


def metadata(name: str, version: str | None = None, wheel: str | None = None) -> tuple[str, str, str] | None:
    """``(METADATA, version, wheel file name)`` of the newest final release of ``name`` on PyPI with a wheel whose
    metadata the index serves, or of ``version``'s (``wheel``, that release's file named in a manifest, first). PEP
    691's JSON index, PEP 658's ``.metadata`` beside a wheel; at most 12 wheels tried. None: no such wheel."""
    from packaging.version import InvalidVersion, Version

    page = f"https://pypi.org/simple/{name}/"
    files = json.loads(_get(page, "application/vnd.pypi.simple.v1+json")).get("files", [])
    wheels = []
    for entry in files:
        filename = entry["filename"]
        if not filename.endswith(".whl") or entry.get("yanked"):
            continue
        try:
            parsed = Version(filename.split("-")[1])
        except InvalidVersion:
            continue
        if (version is None and parsed.is_prerelease) or (version is not None and parsed != Version(version)):
            continue
        wheels.append((parsed, filename == wheel, "-none-any" in filename, filename, entry))
    releases = sorted({w[0] for w in wheels}, reverse=True)[:5]
    ordered = sorted((w for w in wheels if w[0] in releases), key=lambda w: w[:4], reverse=True)
    for parsed, _, _, filename, entry in ordered[:12]:
        url = urllib.parse.urljoin(page, entry["url"]).split("#")[0]
        try:
            return _get(url + ".metadata").decode("utf-8"), str(parsed), filename
        except urllib.error.HTTPError:  # this file's metadata is not served: the next file
            continue
    return None


def as_markdown(text: str) -> tuple[str, str]:
    """``(file name, text)`` of a METADATA file written as pydocs writes one."""
    head, _, body = text.replace("\r\n", "\n").partition("\n\n")
    fields: list[tuple[str, str]] = []
    for line in head.split("\n"):
        if line[:1] in (" ", "\t") and fields:  # a continued value
            fields[-1] = (fields[-1][0], f"{fields[-1][1]} {line.strip()}".strip())
        elif ":" in line:
            name, _, value = line.partition(":")
            fields.append((name.strip(), value.strip()))
    values = dict(fields)
    name, version = values.get("Name", "package"), values.get("Version", "")
    kept = [f"{k}: {v}  " for k, v in fields if k not in DROPPED and k != "Description"]
    description = body.strip() or values.get("Description", "")
    return f"{name}.md", "\n".join([f"# {name} {version}".rstrip(), "", *kept, "", description, ""])


def fetch(out: Path, pydocs: Path, limit: int, seeds: Sequence[str] = SEEDS, pinned: dict[str, dict] | None = None) -> int:
    """Write up to ``limit`` files into ``out/pydocs/docs`` and the versions read into ``out/pydocs/manifest.json``
    (``pinned``, a manifest written before: exactly its versions and wheels); returns how many files are there."""
    docs = out / "pydocs" / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "pydocs" / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else {}
    excluded = {key(p.stem) for p in pydocs.glob("*.md")}
    written = {key(p.stem) for p in docs.glob("*.md")}
    queue = list(pinned) if pinned is not None else [key(s) for s in seeds]
    limit = len(queue) if pinned is not None else limit
    tried: set[str] = set()
    while queue and len(written) < limit:
        name = queue.pop(0)
        if name in tried or name in excluded:
            continue
        tried.add(name)
        if name not in written:
            try:
                entry = (pinned or {}).get(name) or {}
                found = metadata(name, entry.get("version"), entry.get("wheel"))
            except Exception as error:  # noqa: BLE001 - reported, then the next package
                print(f"{name}: {error}", file=sys.stderr)
                continue
            if found is None:
                continue
            text, version, wheel = found
            filename, markdown = as_markdown(text)
            (docs / filename).write_text(markdown, encoding="utf-8")
            written.add(key(Path(filename).stem))
            manifest[name] = {"version": version, "wheel": wheel, "file": filename}
            manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            time.sleep(0.05)
        if pinned is not None:
            continue
        path = next((p for p in docs.glob("*.md") if key(p.stem) == name), None)
        if path is not None:
            queue.extend(key(d) for d in dependencies(header(path)))
    return len(written)


def _license(fields: dict[str, list[str]]) -> str | None:
    for name in ("License-Expression", "License"):
        for value in fields.get(name, []):
            if value and value.upper() != "UNKNOWN" and len(value) <= 40:
                return value
    return None


def questions(folder: Path, per_type: int, seed: int) -> list[dict[str, object]]:
    """``per_type`` questions of each of pydocs' seven types from the headers in ``folder``."""
    rng = random.Random(seed)
    files = sorted(folder.glob("*.md"))
    heads = {p.name: header(p) for p in files}
    names = {p.name: (heads[p.name].get("Name") or [p.stem])[0] for p in files}
    by_key = {key(names[f]): f for f in heads}
    summaries: dict[str, list[str]] = {}
    for f, h in heads.items():
        for s in h.get("Summary", [])[:1]:
            summaries.setdefault(s.rstrip(".").strip(), []).append(f)
    out: list[dict[str, object]] = []

    def add(qtype: str, subject: str, text: str, answers: list[str], files_: list[str]) -> None:
        out.append({"question_id": f"fresh-{qtype}-{key(subject)}-{len(out)}", "type": qtype, "question_text": text,
                    "answers": answers, "supporting_files": files_, "subject": subject})

    def python_answers(fields: dict[str, list[str]]) -> list[str] | None:
        found = min_python(fields)
        if found is None:
            return None
        short, stated = found
        return list(dict.fromkeys([short, f">={short}", f"Python {short}", stated]))

    order = list(heads)
    rng.shuffle(order)
    one_fact = {"author": lambda h: [a] if (a := author(h)) else None, "python": python_answers,
                "license": lambda h: [v] if (v := _license(h)) else None}
    templates = {"author": "Who is the author of the {} package?",
                 "python": "What is the minimum Python version required by {}?",
                 "license": "What license is the {} package released under?"}
    for qtype, answer_of in one_fact.items():
        made = 0
        for f in order:
            answers = answer_of(heads[f])
            if answers and made < per_type:
                add(qtype, names[f], templates[qtype].format(names[f]), answers, [f])
                made += 1
    pairs = [(f, by_key[key(d)]) for f in order for d in dependencies(heads[f]) if key(d) in by_key and by_key[key(d)] != f]
    rng.shuffle(pairs)
    for qtype, ask in (("dep-author", "Who is the author of that package?"),
                       ("dep-python", "What is the minimum Python version that package requires?")):
        made, used = 0, set()
        for f, d in pairs:
            summary = (heads[d].get("Summary") or [""])[0].rstrip(".").strip()
            if made >= per_type or d in used or len(summaries.get(summary, [])) != 1 or not summary:
                continue
            answers = [a] if qtype == "dep-author" and (a := author(heads[d])) else python_answers(heads[d]) if qtype == "dep-python" else None
            if not answers:
                continue
            add(qtype, names[f], f'{names[f]} depends on a package described as "{summary}". {ask}', answers, [f, d])
            used.add(d)
            made += 1
    versions = {f: tuple(int(x) for x in found[0].split(".")) for f in order if (found := min_python(heads[f]))}
    candidates = [f for f in order if f in versions]
    made = 0
    for a, b in zip(candidates[::2], candidates[1::2]):
        if made < per_type and versions[a] != versions[b]:
            newer = a if versions[a] > versions[b] else b
            add("compare-python", names[a], f"Which requires a newer minimum Python version, {names[a]} or {names[b]}?",
                [names[newer]], [a, b])
            made += 1
    authored = [f for f in order if author(heads[f])]
    groups: dict[str, list[str]] = {}
    for f in authored:
        groups.setdefault(author(heads[f]) or "", []).append(f)
    same = [(g[0], g[1]) for g in groups.values() if len(g) > 1]
    rng.shuffle(same)
    yes = same[: per_type // 2]
    no: list[tuple[str, str]] = []
    for _ in range(1000 * per_type):  # bounded: a folder may have too few authors for per_type pairs
        if len(no) >= per_type - len(yes) or len(authored) < 2:
            break
        a, b = rng.sample(authored, 2)
        if author(heads[a]) != author(heads[b]) and (a, b) not in no:
            no.append((a, b))
    for (a, b), answer in sorted([(p, "yes") for p in yes] + [(p, "no") for p in no], key=lambda x: rng.random()):
        add("same-author", names[a], f"Do {names[a]} and {names[b]} have the same author?", [answer], [a, b])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python research/pydocs_fresh.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="write the folder's files from PyPI")
    f.add_argument("--out", type=Path, required=True, help="a data folder (OUT/pydocs/docs)")
    f.add_argument("--data-dir", type=Path, default=Path("../shared/data"), help="the folder holding pydocs/ (its packages are left out)")
    f.add_argument("--limit", type=int, default=260)
    f.add_argument("--manifest", type=Path, default=None, help="a manifest.json written before: fetch exactly its versions")
    q = sub.add_parser("questions", help="write OUT/pydocs/questions_dev.jsonl from the folder's headers")
    q.add_argument("--out", type=Path, required=True)
    q.add_argument("--per-type", type=int, default=20)
    q.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "fetch":
        pydocs = args.data_dir / "pydocs" / "docs"
        if not pydocs.is_dir():
            parser.error(f"{pydocs} is not a folder: pass --data-dir, the folder holding pydocs/")
        pinned = None
        if args.manifest is not None:
            pinned = json.loads(args.manifest.read_text(encoding="utf-8"))
        print(f"{fetch(args.out, pydocs, args.limit, pinned=pinned)} files in {args.out / 'pydocs' / 'docs'}")
        return 0
    rows = questions(args.out / "pydocs" / "docs", args.per_type, args.seed)
    path = args.out / "pydocs" / "questions_dev.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r["type"])] = counts.get(str(r["type"]), 0) + 1
    print(f"{len(rows)} questions in {path}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
