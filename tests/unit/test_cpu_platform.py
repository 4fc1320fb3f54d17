"""The CPU platform of the current stack (cpu_support/verl_cpu_platform.py) inside verl 0.9.1.

Each check runs in the current stack's environment (.venv-current, made by
``setup.sh --device cpu --stack current``), in a fresh interpreter, because verl imports the
platform module at its own import time (VERL_USE_EXTERNAL_MODULES). Without that environment
the tests skip, naming it (conftest.run_in_stack; on CI they fail).
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from conftest import REPO, run_in_stack

MODEL = REPO / "models" / "SmolLM2-135M-Instruct"
PLATFORM_ENV = {"VERL_USE_EXTERNAL_MODULES": "cpu_support.verl_cpu_platform", "VERL_PLATFORM": "cpu"}


def run_current(code: str, **env: str) -> subprocess.CompletedProcess:
    return run_in_stack("current", ["-c", textwrap.dedent(code)], env=env)


def last_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_verl_selects_the_cpu_platform_and_every_patch_holds():
    got = last_json(run_current("""
        import importlib.metadata, json, torch
        import verl
        from verl.plugin.platform import get_platform
        from verl.utils import device, fsdp_utils
        from verl.workers import engine_workers
        from verl.workers.engine.base import EngineRegistry
        from verl.workers.engine.fsdp import transformer_impl
        p = get_platform()
        print(json.dumps({
            "platform": type(p).__name__, "device": device.get_device_name(),
            "backend": p.communication_backend_name(), "ray": p.ray_resource_name(), "ipc": p.is_ipc_supported(),
            "pg_backend": engine_workers.initialize_global_process_group_ray.keywords.get("backend"),
            "device_id": str(fsdp_utils.get_device_id()),
            "engines": sorted(d for d in EngineRegistry._engines["language_model"]["fsdp2"]),
            "cpu_engine": EngineRegistry._engines["language_model"]["fsdp2"]["cpu"].__name__,
            "pin_memory": transformer_impl.CPUOffloadPolicy(pin_memory=True).pin_memory,
            "vllm": importlib.metadata.version("vllm"),
            "mem": device.get_torch_device().mem_get_info()[1] > 0,
        }))
    """, **PLATFORM_ENV))
    assert got == {"platform": "PlatformCPU", "device": "cpu", "backend": "gloo", "ray": "GPU", "ipc": False,
                   "pg_backend": "cpu:gloo", "device_id": "cpu", "engines": ["cpu", "cuda", "npu"], "cpu_engine": "SharedPromptEngine",
                   "pin_memory": False, "vllm": "0.28.0", "mem": True}


def test_without_verl_platform_nothing_is_patched():
    got = last_json(run_current("""
        import json
        import cpu_support.verl_cpu_platform as m
        from verl.workers.engine.fsdp import transformer_impl
        print(json.dumps({"patched": getattr(transformer_impl.CPUOffloadPolicy, "_cpu_patched", False),
                          "available": m.PlatformCPU().is_platform_available()}))
    """, VERL_PLATFORM="", VERL_USE_EXTERNAL_MODULES=""))
    assert got == {"patched": False, "available": False}


def test_a_changed_patch_target_fails_loudly():
    proc = run_current("""
        import cpu_support.verl_cpu_platform as m
        from verl.workers.engine.fsdp import transformer_impl
        del transformer_impl.CPUOffloadPolicy
        m.patch_offload_pin_memory()
    """)
    assert proc.returncode != 0
    assert ("PatchTargetChanged: verl_cpu_platform: verl/workers/engine/fsdp/transformer_impl.py changed "
            "(no CPUOffloadPolicy)") in proc.stderr


@pytest.mark.slow
def test_the_weight_sync_reloads_vllm_and_the_check_catches_a_stale_head():
    """The CPU run's weight sync path (vLLM's reload, then the tied head re-processed) gives
    vLLM the actor's log-probs; the same sync without the head's re-processing is caught by the
    bypass mode's actor/ppo_kl check, which the CI learning test and health_report.py apply. The
    rollout/actor Pearson of token probabilities is not enough alone: most sampled tokens keep a
    probability near 1 under a stale head, so it can stay above 0.99."""
    from grpo_math.health.rules import Thresholds

    if not MODEL.is_dir():
        pytest.skip(f"{MODEL} missing: bash setup.sh --device cpu --stack current")
    proc = run_current(f"import runpy, sys; sys.argv = ['probe', '{MODEL}']; "
                       f"runpy.run_path('{REPO / 'tests' / 'helpers' / 'vllm_sync_probe.py'}', run_name='__main__')")
    assert proc.returncode == 0, proc.stderr[-3000:]
    syncs = {r["sync"]: r for r in map(json.loads, (line for line in proc.stdout.splitlines()
                                                     if line.startswith('{"sync"')))}
    healthy, broken = syncs["healthy"], syncs["skip_lm_head_retie"]
    th = Thresholds()
    assert healthy["pearson"] > 0.999 and healthy["max_abs_logprob_diff"] < 0.01, healthy
    # the stale head: far outside what a healthy sync gives
    assert broken["max_abs_logprob_diff"] > 1.0 and broken["pearson"] < healthy["pearson"], broken
    # the bypass mode's signal, actor/ppo_kl on a response the rollout sampled, tells the two apart
    assert abs(healthy["ppo_kl"]) < th.rollout_ppo_kl_max / 10 < 10 * th.rollout_ppo_kl_max < broken["ppo_kl"], syncs
    print(f"healthy {healthy}, broken {broken}; health_report's alert thresholds {th.rollout_pearson_min}, "
          f"{th.rollout_ppo_kl_max}")
