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
import tempfile
from contextlib import contextmanager
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
