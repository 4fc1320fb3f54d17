"""The CPU platform of the current stack (cpu_support/verl_cpu_platform.py) inside verl 0.9.1.

Each check runs in the current stack's environment (.venv-current, made by
``setup.sh --device cpu --stack current``), in a fresh interpreter, because verl imports the
platform module at its own import time (VERL_USE_EXTERNAL_MODULES). Without that environment
the tests skip, naming it (conftest.run_in_stack; on CI they fail).
"""

from __future__ import annotations

import json
import subprocess

from helpers.current_stack import run_current

PLATFORM_ENV = {"VERL_USE_EXTERNAL_MODULES": "cpu_support.verl_cpu_platform", "VERL_PLATFORM": "cpu"}


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


def test_the_engine_patches_wait_for_the_engine_module():
    got = last_json(run_current("""
        import json, sys
        import verl
        before = {"vllm": "vllm" in sys.modules, "engine": "verl.workers.engine.fsdp.transformer_impl" in sys.modules}
        from verl.workers import engine_workers
        print(json.dumps({**before, "pg_backend": engine_workers.initialize_global_process_group_ray.keywords.get("backend")}))
    """, **PLATFORM_ENV))
    assert got == {"vllm": False, "engine": False, "pg_backend": "cpu:gloo"}


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
