"""Inputs of the wrong shape are refused in one line instead of being read as something else: one string given to
``run_batch`` (not answered a character at a time), and a model name with a ``/`` that is a missing local folder
(not looked up on the Hugging Face hub)."""

from __future__ import annotations

from pathlib import Path

import pytest

from active_rag import ActiveRAG
from active_rag import errors
from active_rag.errors import ActiveRAGError, ModelNotInstalledError


@pytest.mark.parametrize("given", ["abc", b"abc"])
def test_run_batch_refuses_one_string(tiny_lm, given) -> None:  # type: ignore[no-untyped-def]
    QuestionsTypeError = errors.QuestionsTypeError
    rag = ActiveRAG.from_preset("wo-rag", tiny_lm, max_new_tokens=2)
    with pytest.raises(QuestionsTypeError, match=r"run_batch takes a list of questions, got one .*wrap it as \[question\]"):
        rag.run_batch(given)
    with pytest.raises(TypeError):  # also a TypeError (and an ActiveRAGError)
        list(rag.stream_batch(given))
    assert issubclass(QuestionsTypeError, ActiveRAGError)


def test_a_model_path_under_an_existing_folder_is_a_missing_folder(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from active_rag.models.loading import load_pretrained

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "m").mkdir()
    with pytest.raises(ModelNotInstalledError, match=r"No model folder at 'm/nothere': the folder 'm' exists but "
                                                     r"holds no 'nothere'") as caught:
        load_pretrained("m/nothere")
    assert "\n" not in str(caught.value)
    with pytest.raises(ModelNotInstalledError, match=r"Cannot load 'zz/nothere': no folder of that name is here, and it "
                                                     r"is not in the local Hugging Face cache and HF_HUB_OFFLINE is set"):
        load_pretrained("zz/nothere")


def test_a_cached_hub_id_is_still_loaded_from_the_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from active_rag.models import loading

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "Qwen").mkdir()  # a local folder named like the organisation does not hide a cached model
    monkeypatch.setattr(loading, "_in_hub_cache", lambda hub_id: hub_id == "Qwen/cached")
    monkeypatch.setattr(loading, "_load_hub", lambda hub_id, *args, **kwargs: ("loaded", hub_id))
    assert loading.load_pretrained("Qwen/cached") == ("loaded", "Qwen/cached")
