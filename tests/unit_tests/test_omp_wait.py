"""active_rag.omp_wait: OpenMP's wait policy chosen for the command line's own process, given back to llama.cpp's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from active_rag.evaluation.bench_llamacpp_build import LlamaCppBuild, child_env
from active_rag.omp_wait import (DEFAULTED_VARIABLE, WAIT_POLICY_VARIABLE, default_wait_policy, describe_wait_policy,
                                 reference_env, spinning_warning)


def test_passive_only_where_unset_and_before_torch_loads() -> None:
    env: dict[str, str] = {}
    assert default_wait_policy(env, {})
    assert env == {WAIT_POLICY_VARIABLE: "PASSIVE", DEFAULTED_VARIABLE: "1"}
    mine = {WAIT_POLICY_VARIABLE: "ACTIVE"}
    assert not default_wait_policy(mine, {}) and mine == {WAIT_POLICY_VARIABLE: "ACTIVE"}  # the user's stays
    late: dict[str, str] = {}
    assert not default_wait_policy(late, {"torch": object()}) and late == {}  # libgomp already read it


def test_another_programs_process_gets_its_own_default_back() -> None:
    chosen: dict[str, str] = {"PATH": "/bin"}
    default_wait_policy(chosen, {})
    theirs = reference_env(chosen)
    assert theirs == {"PATH": "/bin", DEFAULTED_VARIABLE: "0"}
    assert not default_wait_policy(theirs, {}) and WAIT_POLICY_VARIABLE not in theirs  # its import leaves it unset
    users = {WAIT_POLICY_VARIABLE: "PASSIVE", "PATH": "/bin"}
    assert reference_env(users) == users
    build = LlamaCppBuild("installed", "installed", None, None)
    assert WAIT_POLICY_VARIABLE not in child_env(build, chosen)


def test_the_command_sets_it_before_torch_loads() -> None:
    code = f"import os; from active_rag.cli import main; main(['methods']); print(os.environ.get('{WAIT_POLICY_VARIABLE}'))"
    env = {k: v for k, v in os.environ.items() if k not in (WAIT_POLICY_VARIABLE, DEFAULTED_VARIABLE)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip().splitlines()[-1] == "PASSIVE"


def test_importing_the_library_sets_it_before_torch_loads_and_not_after() -> None:
    env = {k: v for k, v in os.environ.items() if k not in (WAIT_POLICY_VARIABLE, DEFAULTED_VARIABLE)}
    show = f"import os; print(os.environ.get('{WAIT_POLICY_VARIABLE}'))"
    first = subprocess.run([sys.executable, "-c", f"import active_rag; {show}"], capture_output=True, text=True,
                           env=env, check=True)
    assert first.stdout.strip().splitlines()[-1] == "PASSIVE"
    late = subprocess.run([sys.executable, "-c", f"import torch, active_rag; {show}"], capture_output=True, text=True,
                          env=env, check=True)
    assert late.stdout.strip().splitlines()[-1] == "None"  # libgomp already read it: left alone
    mine = subprocess.run([sys.executable, "-c", f"import active_rag; {show}"], capture_output=True, text=True,
                          env={**env, WAIT_POLICY_VARIABLE: "ACTIVE"}, check=True)
    assert mine.stdout.strip().splitlines()[-1] == "ACTIVE"


def test_the_policy_in_words() -> None:
    assert describe_wait_policy({WAIT_POLICY_VARIABLE: "PASSIVE", DEFAULTED_VARIABLE: "1"}) == "PASSIVE (active-rag's default)"
    assert describe_wait_policy({WAIT_POLICY_VARIABLE: "ACTIVE"}) == "ACTIVE (set by the user)"
    assert describe_wait_policy({}).startswith("libgomp's default (torch was loaded before active_rag")


def test_the_llama_cpp_sides_process_keeps_libgomps_default_though_it_imports_active_rag() -> None:
    env = {k: v for k, v in os.environ.items() if k not in (WAIT_POLICY_VARIABLE, DEFAULTED_VARIABLE)}
    ours = dict(env)
    assert default_wait_policy(ours, {})  # the command's own process
    child = child_env(LlamaCppBuild("installed", "installed", None, None), ours)
    show = f"import os; print(os.environ.get('{WAIT_POLICY_VARIABLE}'))"
    out = subprocess.run([sys.executable, "-c", f"import active_rag; {show}"], capture_output=True, text=True,
                         env=child, check=True)
    assert out.stdout.strip().splitlines()[-1] == "None"
    assert describe_wait_policy(child) == "libgomp's default (another program's process)"


def test_loading_the_kernels_with_libgomp_s_default_policy_on_two_threads_warns_once(monkeypatch, caplog) -> None:
    """torch imported first (the variable unset) and more than one thread: OpenMP's workers spin on the kernels' cores,
    and the one warning says how to stop it; a policy chosen by anyone, one thread, or another program's process: none."""
    assert "OMP_WAIT_POLICY=PASSIVE" in spinning_warning(2, {})
    assert spinning_warning(1, {}) is None
    assert spinning_warning(2, {WAIT_POLICY_VARIABLE: "PASSIVE", DEFAULTED_VARIABLE: "1"}) is None
    assert spinning_warning(4, {WAIT_POLICY_VARIABLE: "ACTIVE"}) is None  # the user's choice
    assert spinning_warning(2, {DEFAULTED_VARIABLE: "0"}) is None

    from active_rag import kernels

    if not kernels.loaded():
        pytest.skip("the kernel library is not built here")
    for environ, threads, warned in (({}, 2, True), ({WAIT_POLICY_VARIABLE: "PASSIVE"}, 2, False), ({}, 1, False)):
        monkeypatch.setattr(kernels, "_STATE", {})
        monkeypatch.setattr(kernels, "_register_fake", lambda: None)  # registered by the first load
        monkeypatch.delenv(WAIT_POLICY_VARIABLE, raising=False)
        monkeypatch.delenv(DEFAULTED_VARIABLE, raising=False)
        for key, value in environ.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(kernels.torch, "get_num_threads", lambda threads=threads: threads)
        caplog.clear()
        with caplog.at_level("WARNING", logger="active_rag.kernels"):
            assert kernels.loaded() and kernels.loaded()
        assert [r.getMessage().count("OMP_WAIT_POLICY=PASSIVE") for r in caplog.records] == ([1] if warned else [])
