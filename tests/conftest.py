"""Shared fixtures: a tiny random Llama with a real byte-level BPE tokenizer trained in-test, and fake
retrievers. Everything is built offline, deterministically, in well under a second."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

from active_rag import ActiveLM, Passage

CORPUS = [
    "Kasper Schmeichel is a Danish professional footballer who plays as a goalkeeper.",
    "He is the son of former Manchester United and Danish international goalkeeper Peter Schmeichel.",
    "Peter Schmeichel was voted the IFFHS World's Best Goalkeeper in 1992 and 1993.",
    "Scott Derrickson is an American director. Ed Wood was an American filmmaker.",
    "The answer is yes. So the answer is no. Follow up: Who is he? Intermediate answer: He is a director.",
    "[Search(Danish goalkeeper)] Question: Answer: Below are the external knowledge references.",
]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", bos_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(vocab_size: int, *, seed: int = 0, layers: int = 2, attn: str = "sdpa", max_positions: int = 2048):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
        attn_implementation=attn,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    return build_tiny_model(len(tiny_tokenizer))


@pytest.fixture(scope="session")
def tiny_lm(tiny_model, tiny_tokenizer) -> ActiveLM:
    """A random 2-layer Llama (GQA, sdpa) wrapped in ActiveLM; it never emits end-of-sequence."""
    return ActiveLM(tiny_model, tiny_tokenizer, name="tiny-llama")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model, tiny_tokenizer) -> Path:
    """The tiny model and its tokenizer saved to a folder, loaded like any local HF model (``--model DIR``).
    Shared by the whole session: copy it before changing anything in it."""
    d = tmp_path_factory.mktemp("tiny-model")
    tiny_model.save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A three-passage JSONL corpus for the CLI (`--corpus`)."""
    path = tmp_path / "corpus.jsonl"
    rows = [
        {"id": "a", "title": "Kasper Schmeichel", "text": "Kasper Schmeichel is a Danish goalkeeper."},
        {"id": "b", "title": "Peter Schmeichel", "text": "Peter Schmeichel was voted the IFFHS World's Best Goalkeeper."},
        {"id": "c", "title": "Ed Wood", "text": "Ed Wood was an American filmmaker."},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


class FakeRetriever:
    """Returns ``k`` deterministic passages per query and records every query."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def retrieve(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        n = len(self.queries)
        return [Passage(id=f"q{n}-d{i}", title=f"Title {n}.{i}", text=f"Passage {i} about {query[:40]}") for i in range(k)]


@pytest.fixture
def fake_retriever() -> FakeRetriever:
    return FakeRetriever()


@pytest.fixture
def generated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``generated[0]`` counts the tokens every decoding session has generated so far: tests of when output streams
    read it when a piece arrives."""
    from active_rag.decoding.model import DecodingSession

    count = [0]
    original = DecodingSession.generate

    def generate(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        for step in original(self, *args, **kwargs):
            count[0] += 1
            yield step

    monkeypatch.setattr(DecodingSession, "generate", generate)
    return count
