"""NPU checks without an NPU: tools/npu_env.sh's per-stack defaults, the environment the launcher
exports on npu, and preflight's NPU lines (settings in force, the NZ layout, the Ray probe).

The Ray probe runs against stand-ins for ``ray`` and ``torch_npu`` written to a folder put first
on the import path: Ray places the probe's actor in this process when it has enough "NPU"
resources (FAKE_RAY_NPUS) and torch_npu reports FAKE_NPU_COUNT devices. The real Ray path was run
by hand on a CPU machine (a Ray with no NPU resource, and one declaring {"NPU": 1} without
torch_npu); the messages it gave are the ones asserted here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import preflight as pf
from conftest import REPO

NPU_ENV = REPO / "tools" / "npu_env.sh"
DEFAULT_VARS = ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
                "VLLM_ASCEND_ENABLE_NZ")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DEFAULT_VARS and k not in pf.NPU_SETTINGS}
    env.update(extra)
    return env


def defaults(stack: str, **preset: str) -> subprocess.CompletedProcess:
    """Source tools/npu_env.sh in strict mode, call npu_env_defaults STACK, print the variables."""
    script = (f"set -euo pipefail; source {NPU_ENV}; npu_env_defaults {stack}; "
              + "; ".join(f'echo "{v}=${{{v}-unset}}"' for v in DEFAULT_VARS))
    return subprocess.run(["bash", "-c", script], env=clean_env(**preset), capture_output=True, text=True)


def values(proc: subprocess.CompletedProcess) -> dict[str, str]:
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.splitlines())


# --------------------------------------------------------------------------------------
# tools/npu_env.sh
# --------------------------------------------------------------------------------------
def test_current_stack_defaults_are_verls_npu_examples():
    assert values(defaults("current")) == {
        "HCCL_CONNECT_TIMEOUT": "1500", "HCCL_EXEC_TIMEOUT": "3600",
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1", "VLLM_ASCEND_ENABLE_NZ": "0"}


def test_reference_stack_sets_no_ray_or_nz_variable():
    assert values(defaults("reference")) == {
        "HCCL_CONNECT_TIMEOUT": "1500", "HCCL_EXEC_TIMEOUT": "360",
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "unset", "VLLM_ASCEND_ENABLE_NZ": "unset"}


@pytest.mark.parametrize("stack", ["reference", "current"])
def test_a_value_the_user_set_is_kept(stack):
    got = values(defaults(stack, HCCL_CONNECT_TIMEOUT="7200", VLLM_ASCEND_ENABLE_NZ="2",
                          RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES="0"))
    assert (got["HCCL_CONNECT_TIMEOUT"], got["VLLM_ASCEND_ENABLE_NZ"],
            got["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"]) == ("7200", "2", "0")


def test_an_unknown_stack_is_one_line_and_status_2():
    proc = defaults("auto")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["npu_env_defaults: STACK=auto; expected reference or current"]


def test_every_default_names_its_source():
    """Each export sits under a comment naming the verl (or vllm-ascend) file it comes from."""
    text = NPU_ENV.read_text()
    for var in DEFAULT_VARS:
        for block in text.split(f"export {var}=")[:-1]:
            comment = block.rstrip().rsplit("\n", 12)[-12:]
            assert any(("examples/" in line or "docs/" in line or "verl/" in line or "vllm_ascend/" in line
                        or "launcher" in line) for line in comment if line.strip().startswith("#")), var


# --------------------------------------------------------------------------------------
# what the launcher exports on npu
# --------------------------------------------------------------------------------------
def launcher_env(tmp_path: Path, stack: str, profile: str = "npu_4", **preset: str) -> dict[str, str]:
    """The NPU variables main_ppo's interpreter gets from the launcher (a fake PYTHON records them)."""
    record = tmp_path / "env.txt"
    python = tmp_path / "python"
    python.write_text("#!/usr/bin/env bash\n" + "".join(f'echo "{v}=${{{v}-unset}}" >> {record}\n'
                                                          for v in (*DEFAULT_VARS, "ASCEND_RT_VISIBLE_DEVICES")))
    python.chmod(0o755)
    env = clean_env(DEVICE="npu", STACK=stack, PROFILE=profile, PREFLIGHT="0", PYTHON=str(python),
                    CANN_HOME=str(tmp_path / "no-cann"), OUTPUT_DIR=str(tmp_path / "out"), **preset)
    env.pop("ASCEND_RT_VISIBLE_DEVICES", None)
    proc = subprocess.run(["bash", str(REPO / "run_qwen2_5_1_5b.sh")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in record.read_text().splitlines())


def test_launcher_exports_the_current_stacks_npu_defaults(tmp_path):
    assert launcher_env(tmp_path, "current") == {
        "HCCL_CONNECT_TIMEOUT": "1500", "HCCL_EXEC_TIMEOUT": "3600",
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1", "VLLM_ASCEND_ENABLE_NZ": "0",
        "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}


def test_launcher_keeps_the_users_and_the_profiles_values(tmp_path):
    got = launcher_env(tmp_path, "reference", HCCL_EXEC_TIMEOUT="900")
    assert (got["HCCL_CONNECT_TIMEOUT"], got["HCCL_EXEC_TIMEOUT"], got["VLLM_ASCEND_ENABLE_NZ"]) == ("1500", "900", "unset")
    got = launcher_env(tmp_path, "current", profile="npu_2x8")  # the two-node profile's longer time-outs
    assert (got["HCCL_CONNECT_TIMEOUT"], got["HCCL_EXEC_TIMEOUT"]) == ("1200", "1200")


# --------------------------------------------------------------------------------------
# preflight: settings in force and the NZ layout
# --------------------------------------------------------------------------------------
def test_settings_in_force_are_one_info_line():
    found = [str(p) for p in pf.npu_settings({"HCCL_CONNECT_TIMEOUT": "1500", "ASCEND_RT_VISIBLE_DEVICES": "0,1",
                                              "VLLM_ASCEND_ENABLE_NZ": "0"})]
    assert found == [
        "preflight: INFO NPU settings in force: ASCEND_RT_VISIBLE_DEVICES=0,1, "
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES unset, HCCL_CONNECT_TIMEOUT=1500, HCCL_EXEC_TIMEOUT unset, "
        "VLLM_ASCEND_ENABLE_NZ=0, HCCL_SOCKET_IFNAME unset, GLOO_SOCKET_IFNAME unset"]


@pytest.mark.parametrize("vllm_ascend,value,warns", [
    ("0.23.0", "1", True), ("0.23.0.post1", "2", True), ("0.11.0", "1", True),
    ("0.23.0", "0", False), ("0.23.0", None, False),  # unset: verl 0.9 sets 0 in vLLM's workers
    ("0.9.1", "1", False),  # vllm-ascend 0.9.1 has no VLLM_ASCEND_ENABLE_NZ
    (None, "1", False),
])
def test_nz_layout(vllm_ascend, value, warns):
    found = [str(p) for p in pf.check_nz(vllm_ascend, {} if value is None else {"VLLM_ASCEND_ENABLE_NZ": value})]
    if not warns:
        assert found == []
    else:
        assert found == [
            f"preflight: WARN VLLM_ASCEND_ENABLE_NZ={value} with vllm-ascend {vllm_ascend}: weights are cast to the NZ "
            "layout and the rollout may not receive the actor's weights after a sync: export VLLM_ASCEND_ENABLE_NZ=0 "
            "(tools/npu_env.sh does unless you set it; docs/troubleshooting.md)"]


# --------------------------------------------------------------------------------------
# preflight: the Ray probe's decisions and messages
# --------------------------------------------------------------------------------------
RESTART = "then 'ray stop' and launch again (--no-npu-probe skips this check)"


def judge(seen: dict, **env: str) -> list[str]:
    return [str(p) for p in pf.judge_npu_probe(seen, env, 60)]


def test_probe_that_sees_its_npu_is_info():
    assert judge({"placed": True, "visible": "0,1,2,3", "ray_ids": ["0"], "available": True, "count": 4,
                  "seconds": 3.2}) == [
        "preflight: INFO NPU probe: a Ray actor asking for {'NPU': 1} as verl's workers do sees 4 NPU(s) "
        "(ASCEND_RT_VISIBLE_DEVICES='0,1,2,3' inside it, Ray's NPU ids ['0']; 3.2 s)"]


def test_probe_that_sees_no_npu_names_the_ray_variable():
    assert judge({"placed": True, "visible": "", "ray_ids": ["0"], "available": False, "count": 0}) == [
        "preflight: FAIL NPU probe: a Ray actor holding an NPU sees none (torch_npu.npu.is_available() False, "
        "device_count 0; ASCEND_RT_VISIBLE_DEVICES='' inside it, Ray's NPU ids ['0']): export "
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 and ASCEND_RT_VISIBLE_DEVICES=0,...,N-1 before Ray starts "
        f"(verl's Ascend FAQ; tools/npu_env.sh sets it on STACK=current), {RESTART}"]


def test_probe_that_sees_no_npu_with_the_ray_variable_set_names_the_devices():
    found = judge({"placed": True, "visible": "4", "ray_ids": ["0"], "available": False, "count": 0},
                  RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES="1")
    assert found == [
        "preflight: FAIL NPU probe: a Ray actor holding an NPU sees none (torch_npu.npu.is_available() False, "
        "device_count 0; ASCEND_RT_VISIBLE_DEVICES='4' inside it, Ray's NPU ids ['0']): "
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 is set: check that ASCEND_RT_VISIBLE_DEVICES names NPUs "
        f"this container was given ('npu-smi info'), {RESTART}"]


def test_probe_that_ray_cannot_place():
    assert judge({"placed": False, "resources": {"CPU": 2.0}}) == [
        "preflight: FAIL NPU probe: Ray has no NPU for an actor asking for {'NPU': 1} as verl's workers do (not placed "
        "in 60 s; Ray's resources: CPU 2): start Ray where the NPUs are visible (source CANN's set_env.sh and export "
        f"ASCEND_RT_VISIBLE_DEVICES before 'ray start'), {RESTART}"]


def test_probe_without_torch_npu_in_the_worker():
    assert judge({"placed": True, "visible": "0", "ray_ids": ["0"],
                  "error": "ModuleNotFoundError: No module named 'torch_npu'"}) == [
        "preflight: FAIL NPU probe: torch_npu does not import inside a Ray worker (ModuleNotFoundError: No module "
        "named 'torch_npu'; ASCEND_RT_VISIBLE_DEVICES='0' inside it, Ray's NPU ids ['0']): source CANN's set_env.sh "
        f"before Ray starts (the launcher does), {RESTART}"]


def test_probe_when_ray_does_not_start():
    assert judge({"placed": False, "ray_error": "ConnectionError: Could not find any running Ray instance."}) == [
        "preflight: FAIL NPU probe: Ray did not start (ConnectionError: Could not find any running Ray instance.): "
        "with N_NODES > 1 start the cluster first ('ray start --head', README \"Two nodes\"); else check "
        f"'ray status', {RESTART}"]


# --------------------------------------------------------------------------------------
# the probe itself, against stand-ins for ray and torch_npu
# --------------------------------------------------------------------------------------
FAKE_RAY = '''"""Stand-in for Ray: the actor runs in this process; FAKE_RAY_NPUS "NPU" resources exist."""
import os

from . import exceptions

calls = []


def init(address=None, **kwargs):
    calls.append(("init", address))
    if os.environ.get("FAKE_RAY_INIT_ERROR"):
        raise ConnectionError(os.environ["FAKE_RAY_INIT_ERROR"])


def shutdown():
    calls.append(("shutdown", None))


def cluster_resources():
    return {"CPU": 2.0, "NPU": float(os.environ.get("FAKE_RAY_NPUS", "1")), "memory": 1e9, "node:10.0.0.1": 1.0}


class _Ref:
    def __init__(self, call):
        self.call = call


class _Method:
    def __init__(self, bound):
        self.bound = bound

    def remote(self, *args, **kwargs):
        return _Ref(lambda: self.bound(*args, **kwargs))


class _Actor:
    def __init__(self, obj):
        self.obj = obj

    def __getattr__(self, name):
        return _Method(getattr(self.obj, name))


def remote(**options):
    calls.append(("remote", options))

    class _ActorClass:
        def __init__(self, cls):
            self.cls = cls

        def remote(self, *args, **kwargs):
            return _Actor(self.cls(*args, **kwargs))

    return _ActorClass


def get(ref, timeout=None):
    wanted = [o for name, o in calls if name == "remote"][-1].get("resources", {}).get("NPU", 0)
    if float(os.environ.get("FAKE_RAY_NPUS", "1")) < wanted:
        raise exceptions.GetTimeoutError(f"Get timed out after {timeout} s")
    return ref.call()


class _Context:
    def get_accelerator_ids(self):
        return {"NPU": ["0"]}


def get_runtime_context():
    return _Context()
'''
FAKE_TORCH_NPU = '''"""Stand-in for torch_npu: FAKE_NPU_COUNT devices."""
import os

if os.environ.get("FAKE_TORCH_NPU_ERROR"):
    raise ImportError(os.environ["FAKE_TORCH_NPU_ERROR"])


class npu:
    @staticmethod
    def is_available():
        return int(os.environ.get("FAKE_NPU_COUNT", "1")) > 0

    @staticmethod
    def device_count():
        return int(os.environ.get("FAKE_NPU_COUNT", "1"))
'''


@pytest.fixture
def fakes(tmp_path) -> Path:
    """A folder with the ray and torch_npu stand-ins (torch_npu with a dist-info, as installed)."""
    root = tmp_path / "fakes"
    (root / "ray").mkdir(parents=True)
    (root / "ray" / "__init__.py").write_text(FAKE_RAY)
    (root / "ray" / "exceptions.py").write_text("class GetTimeoutError(Exception):\n    pass\n")
    (root / "torch_npu").mkdir()
    (root / "torch_npu" / "__init__.py").write_text(FAKE_TORCH_NPU)
    info = root / "torch_npu-2.10.0.post4.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.10.0.post4\n")
    return root


@pytest.fixture
def fake_modules(fakes, monkeypatch):
    monkeypatch.syspath_prepend(str(fakes))
    for name in ("ray", "ray.exceptions", "torch_npu"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return fakes


def test_probe_asks_ray_for_one_npu_as_verl_does_and_reports_what_torch_npu_sees(fake_modules, monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("FAKE_NPU_COUNT", "2")
    seen = pf.run_npu_probe(1, 5)
    import ray

    assert ("remote", {"num_cpus": 1, "resources": {"NPU": 1}}) in ray.calls  # verl's resource name "NPU"
    assert ray.calls[0] == ("init", None) and ray.calls[-1] == ("shutdown", None)
    assert {k: seen[k] for k in ("placed", "visible", "available", "count", "ray_ids")} == {
        "placed": True, "visible": "0,1", "available": True, "count": 2, "ray_ids": ["0"]}


def test_probe_joins_the_cluster_with_two_nodes(fake_modules):
    pf.run_npu_probe(2, 5)
    import ray

    assert ray.calls[0] == ("init", "auto")


@pytest.mark.parametrize("env,expect", [
    ({"FAKE_RAY_NPUS": "0"}, "preflight: FAIL NPU probe: Ray has no NPU for an actor asking for {'NPU': 1} as verl's "
                             "workers do (not placed in 5 s; Ray's resources: CPU 2, NPU 0)"),
    ({"FAKE_NPU_COUNT": "0"}, "preflight: FAIL NPU probe: a Ray actor holding an NPU sees none"),
    ({"FAKE_TORCH_NPU_ERROR": "libhccl.so: cannot open shared object file"},
     "preflight: FAIL NPU probe: torch_npu does not import inside a Ray worker (ImportError: libhccl.so: cannot open "
     "shared object file;"),
    ({"FAKE_RAY_INIT_ERROR": "no cluster"}, "preflight: FAIL NPU probe: Ray did not start (ConnectionError: no cluster)"),
])
def test_probe_failures_end_to_end(fake_modules, monkeypatch, env, expect):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    found = [str(p) for p in pf.judge_npu_probe(pf.run_npu_probe(1, 5), os.environ, 5)]
    assert len(found) == 1 and found[0].startswith(expect), found


def test_cli_on_npu_prints_the_settings_and_the_probe(tmp_path, fakes):
    """preflight.py --device npu with one fake NPU node: the settings line and the probe's line
    (the other findings, e.g. no vllm installed, are tested elsewhere)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "davinci0").touch()
    data = tmp_path / "train.parquet"
    import prepare_math
    import pandas as pd

    pd.DataFrame([prepare_math.to_record("What is 1 + 1?", "Level 1", "Algebra", "2", "train", 0)]).to_parquet(data)
    argv = ["--device", "npu", "--stack", "current", "--profile", "npu_1", "--model-path", str(tmp_path / "m"),
            "--train-file", str(data), "--val-file", str(data), "--max-prompt-length", "512",
            "--train-batch-size", "4", "--ppo-mini-batch-size", "4", "--micro-batch", "4", "--n-samples", "4",
            "--n-devices", "1", "--ckpt-dir", str(tmp_path / "ckpt"), "--dev-root", str(dev),
            "--cann-home", str(tmp_path / "no-cann"), "--npu-probe-timeout", "5"]
    env = clean_env(PYTHONPATH=f"{fakes}{os.pathsep}{REPO}", ASCEND_RT_VISIBLE_DEVICES="0", FAKE_NPU_COUNT="0",
                    HCCL_CONNECT_TIMEOUT="1500", RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES="1",
                    VLLM_ASCEND_ENABLE_NZ="0")
    proc = subprocess.run([sys.executable, str(REPO / "preflight.py"), *argv], env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    err = proc.stderr.splitlines()
    assert ("preflight: INFO NPU settings in force: ASCEND_RT_VISIBLE_DEVICES=0, "
            "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1, HCCL_CONNECT_TIMEOUT=1500, HCCL_EXEC_TIMEOUT unset, "
            "VLLM_ASCEND_ENABLE_NZ=0, HCCL_SOCKET_IFNAME unset, GLOO_SOCKET_IFNAME unset") in err
    probe = [line for line in err if "NPU probe" in line]
    assert probe == [
        "preflight: FAIL NPU probe: a Ray actor holding an NPU sees none (torch_npu.npu.is_available() False, "
        "device_count 0; ASCEND_RT_VISIBLE_DEVICES='0' inside it, Ray's NPU ids ['0']): "
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 is set: check that ASCEND_RT_VISIBLE_DEVICES names NPUs "
        f"this container was given ('npu-smi info'), {RESTART}"]
    proc = subprocess.run([sys.executable, str(REPO / "preflight.py"), *argv, "--no-npu-probe"], env=env,
                          capture_output=True, text=True)
    assert "NPU probe" not in proc.stderr and "NPU settings in force" in proc.stderr
