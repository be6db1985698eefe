"""``active-rag eval --ray``: the same evaluation, with the questions sharded across Ray actors.

Nothing about methods or questions lives here. The driver plans the run with
:func:`~active_rag.evaluation.runner.plan_eval`, each actor wraps one
:class:`~active_rag.evaluation.runner.EvalWorker` (the model is loaded once per actor), and the driver
writes every returned row into the same per-question JSONL files as :func:`~active_rag.evaluation.runner.run_eval`
and finishes with :func:`~active_rag.evaluation.runner.finish_eval`. So a run can be resumed by either path,
and its ``results.md`` / ``summary.json`` are the local runner's.

Scheduling: work is cut into tasks of ``--batch-size`` questions of one method; each actor holds at most two
tasks (one running, one queued, so it never waits on the driver). A row is written only when its task has
returned, one complete line at a time, so a file never holds half a row. When an actor dies (a node lost,
``ray.kill``, out of memory), its unfinished tasks go back to the front of the queue and a replacement actor is
started (at most ``num_workers`` replacements per run); every question ends up in its file exactly once.

Placement: one actor per GPU when the cluster has GPUs (``num_gpus=1``), else one per CPU slot
(``num_cpus=1``; Ray then sets ``OMP_NUM_THREADS=1`` in the actor, so torch uses one thread per actor).
Local Ray (``ray.init()``) by default; an existing cluster through ``RAY_ADDRESS`` (``host:port``,
``ray://host:10001`` or ``auto``). Actors on other nodes need active-rag and the model installed there.

Inside an actor the questions of a task run as the local runner runs them (``_answer_all``): one by one, or,
with ``--batch-size B``, up to B in flight whose decode steps the engine batches (continuous batching).
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from active_rag.errors import ActiveRAGError
from active_rag.evaluation.datasets import Example
from active_rag.evaluation.config import EvalConfig, MethodSpec, _retrieves
from active_rag.evaluation.method_engines import load_corpus_index
from active_rag.evaluation.outlock import OutputLock, prepare_output_root
from active_rag.evaluation.runner import (
    EvalReport,
    EvalWorker,
    _answer_all,
    _log_failure,
    eval_output_dir,
    finish_eval,
    method_path,
    plan_eval,
)
from active_rag.evaluation.scoring import resume_rows
from active_rag.evaluation.store import compact_rows_file, is_failed

__all__ = ["DistributedEvalError", "RayStats", "connect_ray", "require_ray", "run_eval_ray"]

#: Tasks queued on one actor at a time: one running, one waiting.
_TASKS_PER_ACTOR = 2
_ADDRESS_TIMEOUT_S = 5.0


class DistributedEvalError(ActiveRAGError):
    """Ray is unreachable, or an evaluation actor could not start, or every actor died; the message names the fix."""


def require_ray() -> Any:
    """Import and return the ``ray`` module; a :class:`~active_rag._optional.MissingDependencyError` naming the
    ``ray`` extra when it is missing."""
    from active_rag._optional import require

    require("ray", extra="ray", purpose="--ray (evaluation on Ray)")
    import ray

    return ray


def _check_reachable(address: str) -> None:
    """Fail fast, with the fix, when ``host:port`` (or ``ray://host:port``) does not accept connections."""
    if address in ("auto", "local"):
        return
    parsed = urlparse(address if "://" in address else f"tcp://{address}")
    host, port = parsed.hostname, parsed.port
    if not host or not port:
        raise DistributedEvalError(
            f"RAY_ADDRESS={address!r} is not an address: use host:port (e.g. 10.0.0.5:6379), ray://host:10001 or auto."
        )
    try:
        with socket.create_connection((host, port), timeout=_ADDRESS_TIMEOUT_S):
            pass
    except OSError as exc:
        raise DistributedEvalError(
            f"Cannot reach the Ray cluster at RAY_ADDRESS={address!r} ({exc.strerror or exc}): start it "
            "(`ray start --head` on that machine) or unset RAY_ADDRESS to run on a local Ray."
        ) from exc


def connect_ray(address: str | None = None, **init_kwargs: Any) -> bool:
    """Connect to Ray: an already initialised Ray is used as it is; else ``address`` or ``$RAY_ADDRESS`` (an
    existing cluster), else a local Ray started on this machine. Returns whether this call started the
    connection (the caller then shuts it down)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        _check_reachable(address)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, **init_kwargs)
    except (ConnectionError, RuntimeError, TimeoutError) as exc:
        where = f"the Ray cluster at RAY_ADDRESS={address!r}" if address else "a local Ray"
        raise DistributedEvalError(
            f"Could not start or join {where} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}): "
            "check `ray status`, or unset RAY_ADDRESS to run on a local Ray."
        ) from exc
    return True


class EvalActor:
    """The body of one Ray actor: one :class:`EvalWorker` (one model load) answering tasks of questions.

    Errors while loading are kept and reported by :meth:`info`, so the driver can raise them as they are."""

    def __init__(self, config: EvalConfig, specs: Sequence[MethodSpec], data_dir: Path) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.error: tuple[str, str] | None = None
        self.worker: EvalWorker | None = None
        try:  # the model goes on this actor's GPU when Ray assigned one (device "auto"; Ray sets CUDA_VISIBLE_DEVICES)
            self.worker = EvalWorker(config, None, specs=specs, data_dir=data_dir)
            self.worker.system_prompt().__enter__()  # this actor's model serves this run only
        except Exception as exc:  # noqa: BLE001 - handed to the driver by info()
            self.error = (type(exc).__name__, str(exc))

    def info(self) -> dict[str, Any]:
        """The model name, index info and every method's engine key, or the loading error."""
        if self.worker is None:
            assert self.error is not None
            return {"error": self.error}
        w = self.worker
        return {
            "model_name": w.model_name,
            "weights": w.weights,
            "index_info": w.index_info,
            "keys": {name: w.engine_key(name) for name in w.specs},
            "unsettled_keys": {name: w.unsettled_key(name) for name in w.specs},
            "pid": os.getpid(),
        }

    def run(self, method: str, examples: Sequence[Example]) -> list[dict[str, Any]]:
        """Rows for ``examples`` with ``method``: the local runner's loop, batched when ``config.batch_size > 1``."""
        assert self.worker is not None, self.error
        return list(_answer_all(self.worker, method, examples, self.worker.config.batch_size))


@dataclass
class RayStats:
    """What happened to the actors of a run (``report.ray`` of :func:`run_eval_ray`)."""

    workers: int = 0
    placement: dict[str, float] = field(default_factory=dict)
    tasks: int = 0
    rows_written: int = 0
    actors_lost: int = 0
    tasks_requeued: int = 0
    replacements: int = 0
    seconds: float = 0.0
    """Wall time of the whole call; ``startup_s`` until every actor had loaded, ``answer_s`` the rest."""
    startup_s: float = 0.0
    answer_s: float = 0.0


@dataclass
class _Task:
    method: str
    examples: list[Example]


def _chunks(method: str, todo: Sequence[Example], size: int) -> list[_Task]:
    return [_Task(method, list(todo[i : i + size])) for i in range(0, len(todo), size)]


def _died(ray: Any, exc: BaseException) -> bool:
    exceptions = ray.exceptions
    kinds = tuple(k for k in (getattr(exceptions, n, None) for n in
                              ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError",
                               "NodeDiedError", "OwnerDiedError")) if isinstance(k, type))
    return isinstance(exc, kinds)


def run_eval_ray(
    config: EvalConfig,
    *,
    num_workers: int | None = None,
    progress: bool = True,
    address: str | None = None,
    max_replacements: int | None = None,
    actor_options: dict[str, Any] | None = None,
) -> EvalReport:
    """:func:`~active_rag.evaluation.runner.run_eval` with the questions sharded across Ray actors.

    ``num_workers``: actors to start (default: the cluster's GPUs, else its CPUs). Each task holds
    ``config.batch_size`` questions of one method, decoded together in the actor. ``max_replacements``: actors
    restarted after deaths before the run gives up (default ``num_workers``). ``actor_options`` override the placement (e.g. ``{"num_cpus": 2}``). Ray is joined as
    :func:`connect_ray` does, and shut down at the end when this call started it. The report carries a
    :class:`RayStats` as ``report.ray``.
    """
    from tqdm.auto import tqdm

    ray = require_ray()
    if num_workers is not None and num_workers < 1:
        raise ValueError(f"--num-workers must be at least 1, got {num_workers}.")
    specs, data_dir, examples = plan_eval(config)
    started = time.perf_counter()
    owns = connect_ray(address)
    actors: dict[int, Any] = {}
    handles: dict[str, Any] = {}
    lock: OutputLock | None = None
    try:
        prepare_output_root(config.out_dir)  # once Ray is reached, before any actor loads the model
        if config.dataset != "retrievalqa" and any(_retrieves(s) for s in specs):
            load_corpus_index(config.dataset, data_dir, config.index_cache, config.hide_titles)  # built once here, loaded by every actor
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        n = num_workers or gpus or max(1, int(resources.get("CPU", 1)))
        options = dict(actor_options or ({"num_gpus": 1} if gpus else {"num_cpus": 1}))
        stats = RayStats(workers=n, placement={k: float(v) for k, v in options.items() if k.startswith("num_")})
        remote_cls = ray.remote(EvalActor)
        run_id = os.urandom(3).hex()
        serial = iter(range(1_000_000))

        def start() -> int:
            i = next(serial)
            actors[i] = remote_cls.options(name=f"active-rag-eval-{run_id}-{i}", **options).remote(config, specs, data_dir)
            return i

        for _ in range(n):
            start()
        try:
            infos = ray.get([actors[i].info.remote() for i in list(actors)])
        except Exception as exc:
            if not _died(ray, exc):
                raise
            raise DistributedEvalError(
                f"An evaluation actor died while loading {config.model!r} ({type(exc).__name__}): check memory and "
                "`ray status`; a cluster's nodes need active-rag and the model installed."
            ) from exc
        for info in infos:
            if "error" in info:
                kind, message = info["error"]
                raise DistributedEvalError(f"An evaluation actor could not start: {kind}: {message}")
        stats.startup_s = time.perf_counter() - started
        first = infos[0]
        model_name = str(first["model_name"])
        keys: dict[str, str] = dict(first["keys"])
        out = config.output_dir = eval_output_dir(config, model_name, str(first.get("weights", "float32")))
        lock = OutputLock(out, config.to_dict()).__enter__()  # released in finally

        done: dict[str, dict[str, dict[str, Any]]] = {}
        queue: deque[_Task] = deque()
        for spec in specs:
            path = method_path(out, spec)
            if not config.resume and path.exists():
                path.unlink()
            done[spec.name] = resume_rows(path, keys[spec.name], first.get("unsettled_keys", {}).get(spec.name),
                                          retry_failed=config.retry_failed)
            todo = [ex for ex in examples if ex.id not in done[spec.name]]
            queue.extend(_chunks(spec.name, todo, max(1, config.batch_size)))
            handles[spec.name] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in finally
        stats.tasks = len(queue)
        total = sum(len(t.examples) for t in queue)
        budget = n if max_replacements is None else max_replacements
        inflight: dict[Any, tuple[int, _Task]] = {}
        bar = tqdm(total=total, desc=f"eval on Ray ({n} workers)", unit="q", disable=not progress)

        def feed() -> None:
            for i, actor in list(actors.items()):
                load = sum(1 for a, _ in inflight.values() if a == i)
                while queue and load < _TASKS_PER_ACTOR:
                    task = queue.popleft()
                    inflight[actor.run.remote(task.method, task.examples)] = (i, task)
                    load += 1

        try:
            feed()
            while inflight:
                ready, _ = ray.wait(list(inflight), num_returns=1)
                ref = ready[0]
                i, task = inflight.pop(ref)
                try:
                    rows = ray.get(ref)
                except Exception as exc:
                    if not _died(ray, exc):
                        raise
                    queue.appendleft(task)
                    stats.tasks_requeued += 1
                    if i in actors:
                        del actors[i]
                        stats.actors_lost += 1
                        if stats.replacements < budget:
                            stats.replacements += 1
                            start()
                    if not actors:
                        raise DistributedEvalError(
                            f"Every evaluation actor died ({stats.actors_lost} lost, {stats.replacements} restarted); "
                            f"the {len(queue) + len(inflight)} unfinished task(s) are not written: check `ray status` "
                            "and the actors' logs, then rerun the same command to resume."
                        ) from exc
                    feed()
                    continue
                fh = handles[task.method]
                for row in rows:
                    qid = str(row["id"])
                    if qid in done[task.method]:  # never a duplicate line, whatever the scheduling
                        continue
                    fh.write(_dumps(row))
                    fh.flush()
                    if is_failed(row):
                        _log_failure(task.method, row)
                    done[task.method][qid] = row
                    stats.rows_written += 1
                bar.update(len(rows))
                feed()
        finally:
            bar.close()
        stats.seconds = time.perf_counter() - started
        stats.answer_s = stats.seconds - stats.startup_s
        info = {"out": out, "model_name": model_name, "weights": str(first.get("weights", "float32")), "index_info": first["index_info"], "data_dir": data_dir}
        for spec in specs:
            handles[spec.name].flush()
            compact_rows_file(method_path(out, spec))  # a failed row answered now: the file keeps the answer only
        report = finish_eval(config, info, specs, examples, keys=keys)
        report.ray = stats  # type: ignore[attr-defined]
        return report
    finally:
        for fh in handles.values():
            fh.close()
        if lock is not None:
            lock.__exit__(None, None, None)
        for actor in actors.values():
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if owns:
            ray.shutdown()


def _dumps(row: dict[str, Any]) -> str:
    import json

    return json.dumps(row, ensure_ascii=False) + "\n"
