"""GPU checks, in one script of a few minutes: the engine's doctor on CUDA, the batched decoding bench in bfloat16 at
batch 1, 8 and 32 on a randomly initialised model of qwen2.5-coder-0.5b's shape (built from its config: the weights
cannot be copied to the GPU machine) with the decode step recorded as CUDA graphs (active_rag.decoding.graph_step)
and eager, and CPU/CUDA agreement on the tiny test models (on CUDA through the recorded step).

    python results/bench/gpu/run_checks.py --config-dir DIR --out OUT

``DIR`` holds the 0.5B model's config.json and tokenizer files (from its converted folder under the model cache).
Writes ``OUT/gpu-checks.json`` and ``OUT/gpu-checks.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import os

ROOT = Path(__file__).resolve().parents[3]
DEVICE = os.environ.get("GPU_CHECKS_DEVICE", "cuda")  # "cpu" for a dry run of the script's logic
sys.path.insert(0, str(ROOT))

from active_rag import ActiveLM, ActiveRAG  # noqa: E402
from active_rag.cli.doctor import format_checks, run_checks  # noqa: E402
from active_rag.evaluation.bench_weights import decode_step_ms, end_masked  # noqa: E402
from active_rag.retrieval.bm25 import BM25Index  # noqa: E402
from tests.conftest import build_tiny_model, build_tokenizer  # noqa: E402

QUESTIONS = [
    "Who is Kasper Schmeichel's father?",
    "When was the author of the manga I\"s born?",
    "Which river flows through Paris, the Seine or the Loire?",
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?",
]


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def generate_ms(model: torch.nn.Module, prompts: list[list[int]], tokens: int, pad: int) -> float:
    """Milliseconds per step of ``model.generate`` on the same prompts (left-padded), greedy, exactly ``tokens``."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    kwargs = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=pad)
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=pad)
    _sync()
    t0 = time.perf_counter()
    model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    _sync()
    return 1000 * (time.perf_counter() - t0) / tokens


def step_only_ms(lm: ActiveLM, prompts: list[list[int]], tokens: int) -> float:
    """Milliseconds per scheduler forward of ``len(prompts)`` sequences, without the sessions' per-token work
    (sampling, entropies, stop rules): the step itself, greedy, one synchronisation a step for the next tokens."""
    from active_rag.decoding.decode_scheduler import _Request

    scheduler = lm.scheduler
    sessions = [lm.session(list(p)) for p in prompts]
    ids = [int(torch.argmax(s._next_logits)) for s in sessions]
    start = [s._fed for s in sessions]
    with torch.inference_mode():
        for t in range(tokens + 2):
            if t == 2:  # two warm-up steps (a shape's first step records its graph)
                _sync()
                t0 = time.perf_counter()
            batch = [_Request(s._cache, ids[i], start[i] + t, False) for i, s in enumerate(sessions)]
            scheduler._forward(batch)
            for r in batch:
                if r.error is not None:
                    raise r.error
            ids = torch.stack([r.logits for r in batch]).argmax(-1).tolist()
    _sync()
    return 1000 * (time.perf_counter() - t0) / tokens


def batched_bench(config_dir: Path, tokens: int) -> dict:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(config_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").to(DEVICE).eval()
    tokenizer = AutoTokenizer.from_pretrained(config_dir)
    lm = ActiveLM(model, tokenizer, name="qwen2.5-coder-0.5b-shape-random")
    prompts = [lm.prompt_ids(q) for q in QUESTIONS]
    decode_step_ms(lm, prompts[:1], 4)  # warm-up
    rows = {}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    scheduler = lm.scheduler
    graph = scheduler.graph
    for b in (1, 8, 32):
        batch = [prompts[i % len(prompts)] for i in range(b)]
        with torch.inference_mode():
            reference = min(generate_ms(model, batch, tokens, pad) for _ in range(2))
        row = {"generate_ms_per_step": reference, "generate_tok_s": 1000 * b / reference}
        for name, step in (("graph", graph), ("eager", None)):
            scheduler.graph = step
            row[f"{name}_ms_per_step"] = min(decode_step_ms(lm, batch, tokens, logits_processor=end_masked(lm))
                                              for _ in range(2))
            if step is not None:  # greedy as a user's session decodes: the step's own token, logprob and entropy
                row["graph_greedy_ms_per_step"] = min(decode_step_ms(lm, batch, tokens, greedy=True) for _ in range(2))
            row[f"{name}_step_only_ms"] = min(step_only_ms(lm, batch, tokens) for _ in range(2))
            row[f"{name}_tok_s"] = 1000 * b / row[f"{name}_ms_per_step"]
            row[f"{name}_over_generate_time"] = row[f"{name}_ms_per_step"] / reference
        scheduler.graph = graph
        rows[str(b)] = row
    for b in rows:
        for name in ("graph", "eager"):
            rows[b][f"{name}_vs_batch1"] = rows[b][f"{name}_tok_s"] / rows["1"][f"{name}_tok_s"]
            rows[b]["graph_greedy_vs_batch1"] = (int(b) / rows[b]["graph_greedy_ms_per_step"]) / (1 / rows["1"]["graph_greedy_ms_per_step"])
            rows[b][f"{name}_step_only_vs_batch1"] = (int(b) / rows[b][f"{name}_step_only_ms"]) / (1 / rows["1"][f"{name}_step_only_ms"])
    graph_info = {"slots": graph.pool.slots if graph else 0, "capacity": graph.pool.capacity if graph else 0,
                  "recorded": graph.recorded if graph else 0, "replays": graph.replays if graph else 0,
                  "eager_runs": graph.eager_runs if graph else 0, "graph_error": graph.graph_error if graph else "no graph step"}
    scheduler.graph = None  # the ragged comparison is of the eager step's attention paths
    # the ragged batch's attention: the per-sequence loop against one padded call, per batch size
    ragged = {}
    for b in (8, 32):
        batch = [prompts[i % len(prompts)] for i in range(b)]
        times = {}
        for mode in ("loop", "padded", "loop", "padded"):
            lm.scheduler.attention = mode
            times[mode] = min(times.get(mode, float("inf")), decode_step_ms(lm, batch, tokens))
        lm.scheduler.attention = "auto"
        ragged[str(b)] = {"loop_ms": times["loop"], "padded_ms": times["padded"], "loop_over_padded": times["loop"] / times["padded"],
                          "padded_tok_s": 1000 * b / times["padded"], "padded_vs_batch1": (1000 * b / times["padded"]) / rows["1"]["eager_tok_s"],
                          "padded_over_generate_time": times["padded"] / rows[str(b)]["generate_ms_per_step"]}
    scheduler.graph = graph
    checks = run_checks(lm, presets=["sr-rag", "flare", "dragin", "sr-rag-linked"])
    return {"rows": rows, "graph": graph_info, "ragged": ragged, "doctor": [c.to_dict() for c in checks],
            "doctor_text": format_checks(checks)}


def agreement_on_tiny_models() -> dict:
    """Greedy answers and retrieval decisions of the presets, CPU float32 against CUDA float32 and bfloat16."""
    tokenizer = build_tokenizer()
    index = BM25Index.demo()
    out = {}
    graph_steps: dict[str, int] = {}
    for seed in range(3):
        base = build_tiny_model(len(tokenizer), seed=seed)
        with torch.no_grad():
            base.lm_head.weight.mul_(8.0)  # a clear winner per step: rounding must not decide a tie
        runs = {}
        for key, device, dtype in (("cpu-float32", "cpu", torch.float32), ("cuda-float32", DEVICE, torch.float32),
                                   ("cuda-bfloat16", DEVICE, torch.bfloat16)):
            import copy

            lm = ActiveLM(copy.deepcopy(base).to(device=device, dtype=dtype), tokenizer, name="tiny")
            for preset in ("sr-rag", "flare", "dragin", "fl-rag"):
                result = ActiveRAG.from_preset(preset, lm, index, max_new_tokens=32).run(QUESTIONS[seed])
                runs[(key, preset)] = (result.answer, [(r.position, r.query, [p.id for p in r.passages]) for r in result.retrievals])
            if key != "cpu-float32" and lm.scheduler is not None:
                graph_steps[key] = graph_steps.get(key, 0) + lm.scheduler.graph_steps
        for preset in ("sr-rag", "flare", "dragin", "fl-rag"):
            ref = runs[("cpu-float32", preset)]
            out[f"seed{seed}/{preset}"] = {
                "cuda-float32 same answer": runs[("cuda-float32", preset)][0] == ref[0],
                "cuda-float32 same decisions": runs[("cuda-float32", preset)][1] == ref[1],
                "cuda-bfloat16 same answer": runs[("cuda-bfloat16", preset)][0] == ref[0],
                "cuda-bfloat16 same decisions": runs[("cuda-bfloat16", preset)][1] == ref[1],
            }
    tiny = ActiveLM(build_tiny_model(len(tokenizer)).to(DEVICE), tokenizer, name="tiny")
    checks = run_checks(tiny)
    return {"presets": out, "graph_steps": graph_steps, "doctor_tiny_cuda": format_checks(checks)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--skip-agreement", action="store_true", help="only the bench and the doctor on the 0.5B-shaped model")
    args = parser.parse_args()
    env = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if DEVICE == "cuda" else DEVICE, "cuda": torch.version.cuda}
    result: dict = {"environment": env}
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    # the bench first; each part's outcome (or its traceback) is written as soon as it is known
    for name, part in (("batched", lambda: batched_bench(args.config_dir, args.tokens)),
                       ("agreement", lambda: agreement_on_tiny_models() if not args.skip_agreement
                        else {"presets": {}, "doctor_tiny_cuda": "(skipped)\n"})):
        try:
            result[name] = part()
        except Exception:  # noqa: BLE001 - reported in the output, the other part still runs
            import traceback

            result[name + "_error"] = traceback.format_exc()
            print(result[name + "_error"], flush=True)
        result["seconds"] = time.perf_counter() - t0
        (args.out / "gpu-checks.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(json.dumps(result.get(name, {}), default=str)[:3000], flush=True)
    write_markdown(result, args.out)
    return 0 if "batched" in result and "agreement" in result else 1


def write_markdown(result: dict, out: Path) -> None:
    """``gpu-checks.md`` from the parts of ``result`` that ran (a failed part shows its traceback)."""
    env = result["environment"]
    result.setdefault("batched", {"graph": {"slots": 0, "capacity": 0, "recorded": 0, "replays": 0, "eager_runs": 0,
                                            "graph_error": result.get("batched_error")},
                                  "rows": {}, "ragged": {}, "doctor_text": result.get("batched_error", "")})
    result.setdefault("agreement", {"presets": {}, "doctor_tiny_cuda": result.get("agreement_error", "")})
    g = result["batched"]["graph"]
    lines = [f"# GPU checks ({env['device']}, torch {env['torch']}, CUDA {env['cuda']})", "",
             "## Batched decoding, bfloat16, random model of qwen2.5-coder-0.5b's shape", "",
             f"The decode step recorded as CUDA graphs (`graph`: {g['slots']} slots of {g['capacity']} positions, "
             f"{g['recorded']} shapes recorded, {g['replays']} replays, {g['eager_runs']} eager runs of its body; "
             f"recording error: {g['graph_error']}) against the eager step (`eager`) and `model.generate`. "
             "`ms/step` is through the engine's sessions (each session samples, computes its entropy and "
             "checks its stop rules per token); `step only` is the scheduler's forward alone.", "",
             "`greedy` is plain greedy decoding through the sessions (no logits processor: each reads the token, "
             "log-probability and entropy the graph computed), the other session rows make end of sequence "
             "unreachable with a logits processor (each session then computes its own).", "",
             "| Batch | graph ms/step | graph greedy ms/step | graph step only ms | eager ms/step | eager step only ms | "
             "generate ms/step | graph / generate time | graph greedy / generate | graph x batch 1 | graph greedy x batch 1 | "
             "graph step only x batch 1 |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b, r in result["batched"]["rows"].items():
        lines.append(f"| {b} | {r['graph_ms_per_step']:.2f} | {r['graph_greedy_ms_per_step']:.2f} | {r['graph_step_only_ms']:.2f} | "
                     f"{r['eager_ms_per_step']:.1f} | {r['eager_step_only_ms']:.1f} | {r['generate_ms_per_step']:.1f} | "
                     f"{r['graph_over_generate_time']:.3f} | {r['graph_greedy_ms_per_step'] / r['generate_ms_per_step']:.3f} | "
                     f"{r['graph_vs_batch1']:.1f}x | {r['graph_greedy_vs_batch1']:.1f}x | {r['graph_step_only_vs_batch1']:.1f}x |")
    lines += ["", "Ragged attention in the batched step (the same model; ms per step):", "",
              "| Batch | loop ms | padded ms | loop / padded | padded tok/s | padded x batch 1 | padded / generate time |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for b, r in result["batched"]["ragged"].items():
        lines.append(f"| {b} | {r['loop_ms']:.1f} | {r['padded_ms']:.1f} | {r['loop_over_padded']:.2f} | {r['padded_tok_s']:.0f} | "
                     f"{r['padded_vs_batch1']:.1f}x | {r['padded_over_generate_time']:.2f} |")
    lines += ["", "## doctor on that model (CUDA, bfloat16)", "", "```", result["batched"]["doctor_text"].rstrip(), "```",
              "", "## doctor on the tiny test model (CUDA, float32)", "", "```", result["agreement"]["doctor_tiny_cuda"].rstrip(), "```",
              "", "## CPU float32 against CUDA float32 / bfloat16 on the tiny test models (3 seeds x 4 presets)", ""]
    agree = result["agreement"]["presets"]
    for key in [] if not agree else ("cuda-float32 same answer", "cuda-float32 same decisions", "cuda-bfloat16 same answer", "cuda-bfloat16 same decisions"):
        lines.append(f"- {key}: {sum(v[key] for v in agree.values())}/{len(agree)}")
    if agree:
        lines.append(f"- decode steps through the recorded graphs in those runs: {result['agreement'].get('graph_steps')}")
    (out / "gpu-checks.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
