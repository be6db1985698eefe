"""The two sides of ``active-rag bench --suite llamacpp``: what each measures (:class:`LlamaCppRunner` for
llama.cpp, :func:`engine_row` and :func:`llamacpp_row`), each in a process of its own.

The suite starts ``python -m active_rag.evaluation.bench_llamacpp_sides`` once per side and model (the engine once
per ``--weights`` option), writes one JSON request to its standard input and reads one line back from its standard
output: ``RESULT_MARKER`` followed by the JSON result (anything else the process prints goes to standard error or
is ignored). A fresh process per side makes its **peak resident set** (``VmHWM`` from ``/proc/self/status``, which
``exec`` resets; ``ru_maxrss`` where there is no ``/proc``) the memory of importing its library, loading the
model, prefilling and decoding, and nothing of the other side. The llama.cpp side imports neither torch nor the
engine's model code, so its figure is llama.cpp's alone.

Requests (``side``):

- ``engine``: ``model``, ``weights``, ``settings``; answers ``row`` (timings, memory), ``prompt`` (the prefill
  prompt's ids) and ``questions`` (the decode prompts' ids), which the llama.cpp side is then given;
- ``llama.cpp``: ``model``, ``settings``, ``prompt``, ``questions``; answers ``row``, with ``bindings``: the version,
  the path and ``llama_print_system_info()`` of the llama-cpp-python that process loaded;
- ``info``: answers ``bindings`` only (no model), which the suite asks once before measuring.
"""

from __future__ import annotations

import contextlib
import gc
import json
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from active_rag.errors import ActiveRAGError

if TYPE_CHECKING:  # pragma: no cover
    from active_rag.evaluation.bench_llamacpp_build import LlamaCppBuild

RESULT_MARKER = "@@active-rag-bench-side@@ "

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class SideProcessError(ActiveRAGError, RuntimeError):
    """A side's process failed or answered nothing readable."""


@dataclass
class SideSettings:
    """The suite settings a side's process needs (plain values: the llama.cpp side must not import torch, which
    validating :class:`~active_rag.evaluation.bench_llamacpp.LlamaCppBenchConfig` does). The names are its."""

    batch_sizes: list[int]
    tokens: int
    prefill_tokens: int
    repeats: int
    threads: int
    n_batch: int


# ------------------------------------------------------------------------------------------------ memory


def status_kb(key: str, text: str | None = None) -> int | None:
    """``key``'s value in kB from ``/proc/self/status`` (or ``text``, its contents); None where absent."""
    if text is None:
        try:
            with open("/proc/self/status", encoding="ascii") as fh:
                text = fh.read()
        except OSError:
            return None
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def peak_rss(status_text: str | None = None) -> tuple[int, str]:
    """This process's peak resident set in bytes and where it was read: ``VmHWM``, else ``ru_maxrss``."""
    kb = status_kb("VmHWM", status_text)
    if kb is not None:
        return kb * 1024, "VmHWM"
    import resource

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (maxrss if sys.platform == "darwin" else maxrss * 1024), "ru_maxrss"


def memory_fields(rss_before_load: int | None) -> dict[str, Any]:
    """The memory columns of a row: the peak so far, and the resident set measured before the model loaded."""
    peak, source = peak_rss()
    return {"peak_rss_bytes": peak, "rss_before_load_bytes": rss_before_load, "rss_source": source}


def _rss_now() -> int | None:
    kb = status_kb("VmRSS")
    return None if kb is None else kb * 1024


# ------------------------------------------------------------------------------------------------ the measurements


def best_seconds(run: Callable[[], Any], repeats: int) -> float:
    """The shortest of ``repeats`` timings of ``run()``."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


class LlamaCppRunner:
    """llama.cpp (llama-cpp-python's low-level API) over one GGUF file: batched prefill and greedy decoding of
    several sequences in one KV cache."""

    def __init__(self, gguf: Path, *, threads: int, n_ctx: int, n_batch: int, n_seq_max: int) -> None:
        import llama_cpp
        from llama_cpp import _internals

        self._llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                                   n_threads=threads, n_threads_batch=threads, verbose=False)
        params = self.llm.context_params
        params.n_seq_max = n_seq_max
        params.kv_unified = True  # one cache of n_ctx cells shared by the sequences
        self.ctx = _internals.LlamaContext(model=self.llm._model, params=params, verbose=False)
        self.n_batch = n_batch
        self.batch = _internals.LlamaBatch(n_tokens=max(n_batch, n_seq_max), embd=0, n_seq_max=n_seq_max, verbose=False)
        self.n_vocab = self.llm.n_vocab()

    def close(self) -> None:
        """Free the batch, the context and the model."""
        self.batch.close()
        self.ctx.close()
        self.llm.close()

    def _decode(self, entries: Sequence[tuple[int, int, int, bool]]) -> None:
        """One ``llama_decode`` of ``(token, position, sequence, wants logits)`` entries."""
        b = self.batch.batch
        b.n_tokens = len(entries)
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i] = token
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
        self.ctx.decode(self.batch)

    def clear(self) -> None:
        """Empty the KV cache of every sequence."""
        self._llama_cpp.llama_memory_clear(self._llama_cpp.llama_get_memory(self.ctx.ctx), True)

    def prefill(self, ids: Sequence[int], seq: int = 0) -> None:
        """Feed ``ids`` to sequence ``seq`` from position 0, ``n_batch`` tokens a call; logits of the last."""
        for start in range(0, len(ids), self.n_batch):
            chunk = ids[start : start + self.n_batch]
            last = start + len(chunk) == len(ids)
            self._decode([(t, start + i, seq, last and i == len(chunk) - 1) for i, t in enumerate(chunk)])

    def _argmax(self, index: int) -> int:
        """The greedy token of the ``index``-th logits of the last decode."""
        import numpy as np

        logits = np.ctypeslib.as_array(self.ctx.get_logits_ith(index), shape=(self.n_vocab,))
        return int(logits.argmax())

    def decode_step_ms(self, prompts: Sequence[Sequence[int]], tokens: int) -> float:
        """Milliseconds per decode step of ``len(prompts)`` sequences, greedy, prefill not timed."""
        self.clear()
        positions: list[int] = []
        current = []
        for seq, ids in enumerate(prompts):
            self.prefill(ids, seq)
            positions.append(len(ids))
            current.append(self._argmax(-1))  # the first token: from this prefill's last logits
        t0 = time.perf_counter()
        for _ in range(tokens):
            self._decode([(current[s], positions[s], s, True) for s in range(len(prompts))])
            positions = [p + 1 for p in positions]
            current = [self._argmax(s) for s in range(len(prompts))]
        return 1000 * (time.perf_counter() - t0) / tokens

    def prefill_tokens_per_s(self, ids: Sequence[int], repeats: int) -> float:
        """Prompt tokens per second of the best of ``repeats`` prefills of ``ids`` into an emptied cache."""
        def run() -> None:
            self.clear()
            self.prefill(ids)

        return len(ids) / best_seconds(run, repeats)


def gguf_decode_bytes(gguf: Path) -> int:
    """Bytes of the GGUF's tensors that one decode step reads: all but the token embedding, plus one of its rows."""
    import gguf as gguf_py

    reader = gguf_py.GGUFReader(str(gguf))
    total = 0
    for tensor in reader.tensors:
        if tensor.name == "token_embd.weight":
            rows = int(tensor.shape[-1]) if len(tensor.shape) > 1 else 1
            total += int(tensor.n_bytes) // max(rows, 1)
        else:
            total += int(tensor.n_bytes)
    return total


QUESTIONS = [
    "Who is Kasper Schmeichel's father?",
    "A Japanese manga series based on a 16 year old high school student Ichitaka Seto, is written and illustrated by someone born in what year?",
    "Which river flows through Paris?",
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?",
]
"""The decode prompts (one per sequence, repeated for larger batches)."""


def _prefill_label(lm: Any) -> str:
    """How the engine's side prefills: ``int8 kernel`` where its packed layers prefill with active-rag's kernel
    (:func:`~active_rag.models.prefill_path.kernel_prefill`), else the dense product's dtype."""
    from active_rag.models.prefill_path import prefills_with_kernel
    from active_rag.models.quantized import prefill_dtype

    if prefills_with_kernel(lm.model):
        return "int8 kernel"
    return str(prefill_dtype()).removeprefix("torch.")


def _cpu_capability() -> str:
    import torch

    return torch.backends.cpu.get_cpu_capability()


def _kernel_isa() -> str | None:
    """The path active-rag's kernels decode with in this process, or ``None`` where they do not."""
    from active_rag import kernels

    return kernels.default_isa() if kernels.available() else None


def _kernel_description() -> str:
    """Which kernel decoded the packed layers, and why (:func:`active_rag.kernels.describe`, as ``doctor`` says it)."""
    from active_rag import kernels

    return kernels.describe()


def engine_row(model: str, weights: str, config: SideSettings) -> tuple[dict[str, Any], list[int], list[list[int]]]:
    """The engine's row, the prefill prompt's ids and the decode prompts' ids (the chat template applied); run in
    the engine side's process."""
    from active_rag.evaluation.bench_weights import _prefill_prompt, decode_step_ms, prefill_tokens_per_s
    from active_rag.decoding.model import ActiveLM
    from active_rag.models.quantized import model_weight_bytes

    t0 = time.perf_counter()
    lm = ActiveLM.load(model, weights=weights, device="cpu")
    load_s = time.perf_counter() - t0
    prompt = _prefill_prompt(lm, config.prefill_tokens)
    questions = [lm.prompt_ids(q) for q in QUESTIONS]
    decode_step_ms(lm, questions[:1], 4)  # warm-up: first-call allocations
    row: dict[str, Any] = {
        "side": "active-rag", "model": model, "weights": lm.weights, "prefill_dtype": _prefill_label(lm),
        "kernel_isa": _kernel_isa(), "kernel": _kernel_description(), "cpu_capability": _cpu_capability(),
        "load_s": load_s, "weight_bytes": model_weight_bytes(lm.model), "decode_ms": {},
        "prefill_tok_s": prefill_tokens_per_s(lm, prompt, config.repeats),
    }
    for b in config.batch_sizes:
        batch = [questions[i % len(questions)] for i in range(b)]
        row["decode_ms"][str(b)] = statistics.median(decode_step_ms(lm, batch, config.tokens) for _ in range(config.repeats))
    del lm
    gc.collect()
    return row, prompt, questions


def llamacpp_row(model: str, config: SideSettings, prompt: list[int], questions: list[list[int]]) -> dict[str, Any]:
    """llama.cpp's timings on ``model``'s GGUF (no ``weight_bytes``: the side's process adds them after reading its
    peak memory); run in the llama.cpp side's process."""
    from active_rag.models.gguf_files import resolve_gguf

    path = resolve_gguf(model)
    # one KV cache shared by the sequences: the prefill prompt alone, or every decode sequence at once
    per_sequence = max(len(q) for q in questions) + config.tokens + 8
    n_ctx = max(len(prompt) + 8, per_sequence * max(config.batch_sizes))
    t0 = time.perf_counter()
    runner = LlamaCppRunner(path, threads=config.threads, n_ctx=n_ctx, n_batch=config.n_batch, n_seq_max=max(config.batch_sizes))
    load_s = time.perf_counter() - t0
    try:
        runner.decode_step_ms(questions[:1], 4)  # warm-up
        row: dict[str, Any] = {
            "side": "llama.cpp", "model": model, "weights": "gguf", "load_s": load_s,
            "decode_ms": {}, "prefill_tok_s": runner.prefill_tokens_per_s(prompt, config.repeats),
        }
        for b in config.batch_sizes:
            batch = [questions[i % len(questions)] for i in range(b)]
            row["decode_ms"][str(b)] = statistics.median(runner.decode_step_ms(batch, config.tokens) for _ in range(config.repeats))
    finally:
        runner.close()
    return row


# ------------------------------------------------------------------------------------------------ the sides


def bindings_info() -> dict[str, Any]:
    """The llama-cpp-python this process loads: version, path and compiled-in CPU features."""
    import llama_cpp

    from active_rag.omp_wait import describe_wait_policy

    info = llama_cpp.llama_print_system_info()
    return {"version": getattr(llama_cpp, "__version__", None), "path": str(llama_cpp.__file__),
            "system_info": (info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)).strip(),
            "omp_wait_policy": describe_wait_policy()}


def measure_engine(request: dict[str, Any]) -> dict[str, Any]:
    """The engine's row (timings and memory), the prefill prompt's ids and the decode prompts' ids."""
    import torch

    from active_rag.decoding.model import ActiveLM  # noqa: F401 - imported before the baseline is read

    settings = SideSettings(**request["settings"])
    torch.set_num_threads(settings.threads)
    before = _rss_now()
    row, prompt, questions = engine_row(request["model"], request["weights"], settings)
    row.update(memory_fields(before))
    return {"row": row, "prompt": prompt, "questions": questions}


def measure_llamacpp(request: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's row: timings, memory (read before the GGUF's tensor sizes are), the bindings used."""
    from active_rag.models.gguf_files import resolve_gguf

    bindings = bindings_info()
    before = _rss_now()
    settings = SideSettings(**request["settings"])
    row = llamacpp_row(request["model"], settings, request["prompt"], request["questions"])
    row.update(memory_fields(before))
    row["torch_loaded"] = "torch" in sys.modules
    row["weight_bytes"] = gguf_decode_bytes(resolve_gguf(request["model"]))
    row["bindings"] = bindings
    return {"row": row}


def prepare_engine(request: dict[str, Any]) -> dict[str, Any]:
    """Load the model once so that its one-time work (the GGUF converted, the weights packed and cached) happens
    here, not in the measured process, whose peak resident set is then a user's every later load."""
    from active_rag.decoding.model import ActiveLM

    ActiveLM.load(request["model"], weights=request["weights"], device="cpu")
    return {}


SIDES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "prepare": prepare_engine,
    "engine": measure_engine,
    "llama.cpp": measure_llamacpp,
    "info": lambda request: {"bindings": bindings_info()},
}


def child_main(stdin: Any = None, stdout: Any = None) -> int:
    """The side process: one JSON request in, one ``RESULT_MARKER`` line out (other prints go to stderr)."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    request = json.loads(stdin.read())
    with contextlib.redirect_stdout(sys.stderr):
        result = SIDES[request["side"]](request)
    stdout.write(RESULT_MARKER + json.dumps(result) + "\n")
    stdout.flush()
    return 0


# ------------------------------------------------------------------------------------------------ the parent


def parse_child_output(stdout: str, label: str = "side") -> dict[str, Any]:
    """The result of the last ``RESULT_MARKER`` line of a side's output."""
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if not lines:
        raise SideProcessError(f"{label}: the process answered no result line")
    return json.loads(lines[-1][len(RESULT_MARKER):])


def describe_exit(returncode: int) -> str:
    """``exit 1``, or ``signal SIGSEGV`` for a process a signal ended."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit {returncode}"


def run_side(request: dict[str, Any], *, label: str, env: dict[str, str] | None = None,
             runner: Runner = subprocess.run) -> dict[str, Any]:
    """Run one side's process on ``request`` and return its result; :class:`SideProcessError` (with the last
    line of its standard error) where it fails."""
    proc = runner([sys.executable, "-m", __name__], input=json.dumps(request), capture_output=True, text=True,
                  env=env, check=False)
    if proc.returncode != 0:
        tail = [line for line in (proc.stderr or "").splitlines() if line.strip()]
        raise SideProcessError(f"{label} failed ({describe_exit(proc.returncode)}): {tail[-1] if tail else 'no output'}")
    return parse_child_output(proc.stdout, label)


def probe_bindings(build: LlamaCppBuild, progress: bool = True) -> tuple[LlamaCppBuild, dict[str, Any]]:
    """The build and its ``bindings`` as its own process loads them; a native build that cannot be loaded (or
    loads other bindings than its own) gives way to the installed ones, with one line saying so."""
    from active_rag.evaluation.bench_llamacpp_build import child_env, installed_build

    try:
        info = run_side({"side": "info"}, label="llama.cpp bindings", env=child_env(build))["bindings"]
        if build.site and not info["path"].startswith(build.site):
            raise SideProcessError(f"llama_cpp was loaded from {info['path']}, not from {build.site}")
        return build, info
    except SideProcessError as error:
        if not build.site:
            raise
        message = f"native build unusable ({error}); measuring the installed bindings"
        if progress:
            print(f"[llamacpp] llama.cpp {message}", file=sys.stderr, flush=True)
        build = installed_build(build.requested, message)
        return build, run_side({"side": "info"}, label="llama.cpp bindings", env=child_env(build))["bindings"]


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(child_main())


__all__ = [
    "QUESTIONS",
    "RESULT_MARKER",
    "SIDES",
    "LlamaCppRunner",
    "SideProcessError",
    "SideSettings",
    "best_seconds",
    "bindings_info",
    "child_main",
    "describe_exit",
    "engine_row",
    "gguf_decode_bytes",
    "llamacpp_row",
    "measure_engine",
    "measure_llamacpp",
    "parse_child_output",
    "peak_rss",
    "probe_bindings",
    "run_side",
    "status_kb",
]
