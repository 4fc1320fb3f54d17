"""What every script of the recipe needs: one-line errors, argument types, atomic output files.

- **One line per error.** Bad input raises :class:`DataError` naming the file, the field and what was
  expected (exit 1); bad arguments, :class:`ArgumentParser`'s one line (exit 2).
- **Nothing half-written.** Every output goes to a temporary file beside its target, is fsynced, gets the
  mode a plain ``open`` would give, then replaces the target; on any error the target is untouched.

Standard library only: the launcher's guards import it with the system's python3, before any environment.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Mapping, Optional


class DataError(Exception):
    """Bad input (data, model folder, output folder); the message is the one line shown to the user."""


def one_line(text: object, limit: int = 120) -> str:
    """``text`` with its whitespace collapsed to single spaces, cut to ``limit`` characters."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (``PROG: error: MESSAGE``, exit 2); description and epilog keep line breaks."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {one_line(message, 300)}\n")


def checked(convert, expected: str, bad=lambda value: False):
    """argparse type: ``convert(text)``; 'expected EXPECTED' when it raises ValueError or ``bad(value)``."""
    def parse(text: str):
        try:
            value = convert(text)
            if not bad(value):
                return value
        except ValueError:
            pass
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return parse


#: argparse type: an integer >= 1
positive_int = checked(int, "an integer >= 1", lambda value: value < 1)


def file_mode() -> int:
    """The mode a new file gets from ``open``: ``0o666`` minus the process umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def ensure_output_dir(folder: Path, knob: str) -> None:
    """Create ``folder`` (and parents) and check that it is writable; else DataError naming ``knob`` (the option)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"{knob} {folder}: output folder missing and cannot be created"
                        f" ({exc.strerror or type(exc).__name__}); expected a writable folder") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DataError(f"{knob} {folder}: output folder not writable; expected a writable folder")


def _write_all(writes: Mapping[Path, object]) -> None:
    """Call each ``write(temporary name)`` of ``{target: write}``, then move every target into place: all or none."""
    pending: list[tuple[str, Path]] = []
    try:
        for path, write in writes.items():
            path = Path(path)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.close(fd)
            pending.append((tmp, path))
            write(tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.chmod(tmp, file_mode())
    except BaseException:
        for tmp, _ in pending:
            Path(tmp).unlink(missing_ok=True)
        raise
    for tmp, path in pending:
        os.replace(tmp, path)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (module docstring); creates the folder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _write_all({path: lambda tmp: Path(tmp).write_bytes(data)})


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: object, indent: Optional[int] = 2) -> None:
    """Write ``obj`` as UTF-8 JSON (non-ASCII kept, trailing newline) to ``path`` atomically."""
    write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=indent) + "\n")


def write_parquet_atomic(tables: Mapping[Path, object]) -> None:
    """Write every ``{path: pyarrow.Table}``, all or none."""
    import pyarrow.parquet as pq

    _write_all({path: (lambda tmp, table=table: pq.write_table(table, tmp)) for path, table in tables.items()})
