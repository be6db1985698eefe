"""``active-rag doctor``: the one-command check of the engine on a user's device."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from active_rag import kernels
from active_rag.cli import doctor
from active_rag.cli.commands import main


def test_doctor_passes_every_check_on_this_machine(tiny_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--model", str(tiny_dir), "--methods", "sr-rag,dragin,flare", "--weights", "float32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in out["checks"]]
    assert names == ["environment", "finite logits", "capture is invisible", "prefix cache", "batched = serial",
                     "padded attention = loop", "layers in one op = loop", "graphed step = eager",
                     "out of memory isolated", "every preset"]
    assert out["passed"] and all(c["status"] == "PASS" for c in out["checks"])
    by = {c["name"]: c["detail"] for c in out["checks"]}
    assert "cpu" in by["environment"] and "weights float32" in by["environment"]
    assert by["every preset"].startswith("3 presets answered")
    assert "from the cache" in by["prefix cache"]
    assert by["graphed step = eager"].startswith("skipped: the decode step is 'lean' on cpu")
    assert by["padded attention = loop"].startswith("3 sequences x 16 steps, logits within")
    assert by["out of memory isolated"].startswith("the other sequence decoded its serial tokens; KV budget 4.00 GiB")
    assert by["layers in one op = loop"] == "skipped: this model's decode step runs its layers as a Python loop"


@pytest.mark.skipif(not kernels.available(), reason="active-rag's kernels do not decode here")
def test_the_layers_op_check_compares_it_with_the_loop_on_packed_weights(tiny_dir: Path,
                                                                         capsys: pytest.CaptureFixture[str],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["doctor", "--model", str(tiny_dir), "--methods", "sr-rag", "--weights", "int8", "--json"]) == 0
    by = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert "decode layers in one op" in by["environment"]["detail"]
    assert by["layers in one op = loop"]["detail"] == "3 sequences x 16 steps, the same logits to the bit"

    from active_rag.decoding.kernel_layers import KernelLayers

    run = KernelLayers.run

    def off_by_a_bit(self, *args):  # what a broken op would give
        out = run(self, *args)
        return None if out is None else (out[0], out[1] * 1.01)

    monkeypatch.setattr(KernelLayers, "run", off_by_a_bit)
    assert main(["doctor", "--model", str(tiny_dir), "--methods", "sr-rag", "--weights", "int8", "--json"]) == 1
    by = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert by["layers in one op = loop"]["status"] == "FAIL"
    assert "the one op's logits differ from the loop's" in by["layers in one op = loop"]["detail"]


def test_a_failing_check_is_reported_and_the_others_still_run(tiny_dir: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(lm, ids):  # what a device whose attention capture changes the tokens would report
        raise AssertionError("capturing attention changed the greedy tokens: [1] vs [2]")

    monkeypatch.setattr(doctor, "_capture", broken)
    assert main(["doctor", "--model", str(tiny_dir), "--methods", "sr-rag", "--weights", "float32"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"FAIL  capture is invisible +AssertionError: capturing attention changed the greedy tokens", out)
    assert "PASS  every preset" in out and out.strip().endswith("9 of 10 checks passed; 1 failed")


def test_doctor_names_a_bad_method_in_one_line(tiny_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--model", str(tiny_dir), "--methods", "sr-rag,telepathy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'telepathy'" in err and "dragin" in err


def test_the_padded_attention_line_says_what_its_numbers_mean(tiny_lm) -> None:
    detail = doctor._padded(tiny_lm, tiny_lm.prompt_ids(doctor.QUESTION))
    assert "auto: auto" not in detail
    assert re.search(r"\(tolerance [\d.e-]+: 0\.1% of the logits' largest magnitude [\d.]+, float32\)", detail), detail
    assert detail.endswith("batched decoding uses the per-sequence loop on cpu (attention='auto': the padded call was "
                           "not measured faster there)")


def test_the_graphed_step_check_runs_the_steps_body_off_cuda(tiny_dir: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTIVE_RAG_DECODE_STEP", "graph")  # the static-pool step on the CPU, without a recording
    assert main(["doctor", "--model", str(tiny_dir), "--methods", "sr-rag", "--weights", "float32", "--json"]) == 0
    by = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert by["graphed step = eager"]["status"] == "PASS"
    detail = by["graphed step = eager"]["detail"]
    assert detail.startswith("3 sequences x 16 steps, greedy tokens the eager step's at 48 of 48, logits within")
    assert "its body without a recording on cpu" in detail
    assert all(c["status"] == "PASS" for c in by.values())
