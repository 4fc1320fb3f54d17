"""Read MATH problems from any of the layouts evaluate.py takes, with each problem's chat turns
(the training prompt) and reference; check MATH-lighteval's columns (prepare_math.py, parquet2json.py)
and take the reference answer from a solution as OpenCompass does."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Optional, Sequence

import new_math_reward as nmr
from grpo_math.evaluation import recipe
from grpo_math.io import DataError, one_line

#: The layouts, detected by their fields (never by file name) in this order: name -> (required fields,
#: what a row gives).
LAYOUTS = {
    "verl": (("data_source", "prompt", "reward_model", "extra_info"),
             "prepare_math.py's verl parquet: the row's own prompt, reference reward_model.ground_truth, "
             "id {extra_info.split}-{extra_info.index}"),
    "lighteval": (("problem", "level", "type", "solution"),
                  "a MATH-lighteval parquet (the shipped data/math-lighteval/data/test-00000-of-00001.parquet), or "
                  "OpenCompass's math.json (parquet2json.py) in key order: reference the solution's last \\boxed{} "
                  "(new_math_reward.extract_last_boxed, as prepare_math.py, a row with an empty box dropped), "
                  "id {split}-{row}, the split from the file name (test-00000-... -> test, the ids a verl parquet "
                  "of that split gets; math.json -> math)"),
    "math500": (("problem", "answer"),
                "MATH-500-style JSON lines (optional unique_id, subject, level, solution): reference answer, "
                "id unique_id"),
}


def detect_format(fields: Iterable[str]) -> Optional[str]:
    """Name of the first layout of LAYOUTS whose required fields are all in ``fields``, else None."""
    have = set(fields)
    return next((name for name, (required, _) in LAYOUTS.items() if set(required) <= have), None)


def level_name(value: object) -> str:
    """``3`` / ``"3"`` / ``"Level 3"`` -> ``"Level 3"``; anything else as a string."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        return f"Level {int(value)}"
    s = "" if value is None else str(value).strip()
    return f"Level {s}" if s.isdigit() else s


def read_parquet(path: Path, expected: str):
    """The pyarrow table of a parquet file; DataError naming ``expected`` when it is missing, one line
    when it is unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise DataError(f"{path}: file not found (expected {expected})")
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable parquet file ({one_line(exc)})") from None


def read_rows(path: Path) -> list[dict]:
    """Rows of a parquet, JSON-lines or math.json file as dicts. Raises DataError."""
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected a MATH parquet or JSON-lines file)")
    if path.suffix == ".parquet":
        return read_parquet(path, "a MATH parquet file").to_pylist()
    if path.suffix not in (".jsonl", ".json"):
        raise DataError(f"{path}: unsupported file type '{path.suffix}'; expected .parquet or .jsonl")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None  # one JSON object per line, read below
        if isinstance(obj, dict) and obj and all(isinstance(v, dict) for v in obj.values()):
            return list(obj.values())  # OpenCompass's math.json: records in key order
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: line {lineno}: not valid JSON ({exc.msg}); expected one JSON object "
                                "per line") from None
            if not isinstance(rows[-1], dict):
                raise DataError(f"{path}: line {lineno}: expected a JSON object, found {type(rows[-1]).__name__}")
    return rows


def _text(path: Path, where: str, field: str, value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{path}: {where}: field '{field}': expected a non-empty string, found "
                        f"{one_line(repr(value), 60)}")
    return value


def _problem(path: Path, i: int, row: dict, fmt: str, split: str) -> Optional[dict]:
    """``{id, problem, level, type, ground_truth, data_source, messages (the training prompt's turns), extra_info}``
    of a row; None for a lighteval row with an empty box."""
    where = f"row {i}"
    if fmt == "verl":
        prompt = row["prompt"]
        if (not isinstance(prompt, (list, tuple)) or not prompt
                or not all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in prompt)):
            raise DataError(f"{path}: {where}: field 'prompt': expected a list of {{role, content}} messages, "
                            f"found {one_line(repr(prompt), 60)}")
        messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
        info = row["extra_info"] or {}
        return {"id": f"{info.get('split', split)}-{info.get('index', i)}",
                "problem": ([m["content"] for m in messages if m["role"] == "user"] or [messages[-1]["content"]])[-1],
                "level": level_name(info.get("level")), "type": str(info.get("type") or ""),
                "ground_truth": _text(path, where, "reward_model.ground_truth",
                                      (row["reward_model"] or {}).get("ground_truth")),
                "data_source": _text(path, where, "data_source", row["data_source"]), "messages": messages,
                "extra_info": {k: info.get(k) for k in ("split", "index", "level", "type")}}
    problem = _text(path, where, "problem", row["problem"])
    if fmt == "lighteval":
        solution = _text(path, where, "solution", row["solution"])
        gt = nmr.extract_last_boxed(solution)
        if gt is None:
            raise DataError(f"{path}: {where}: field 'solution': expected a complete \\boxed{{...}} answer, found "
                            f"...{one_line(solution[-60:], 60)}")
        if not gt.strip():
            return None
        pid, level, subject = f"{split}-{i}", row["level"], row["type"]
    else:
        gt = _text(path, where, "answer", row["answer"])
        pid, level, subject = str(row.get("unique_id") or f"{split}-{i}"), row.get("level"), row.get("subject")
        subject = subject or row.get("type")
    return {"id": pid, "problem": problem, "level": level_name(level), "type": str(subject or ""), "ground_truth": gt,
            "data_source": recipe.DEFAULT_DATA_SOURCE, "extra_info": None,
            "messages": recipe.messages(problem)}


def load_problems(path: Path) -> tuple[str, list[dict], list[str]]:
    """``(layout, problems, dropped)`` of the MATH file ``path`` (LAYOUTS): the problems (:func:`_problem`) in file
    order and the ids of rows dropped for an empty box. Raises DataError."""
    rows = read_rows(path)
    if not rows:
        raise DataError(f"{path}: no rows; expected at least one MATH problem")
    fmt = detect_format(rows[0].keys())
    if fmt is None:
        raise DataError(f"{path}: unknown MATH data layout: fields {sorted(rows[0].keys())}; expected "
                        + "; ".join(f"{name} ({', '.join(fields)})" for name, (fields, _) in LAYOUTS.items()))
    split = path.name.split("-")[0] if path.name.split("-")[0] in ("train", "test") else path.stem
    problems, dropped, seen = [], [], set()
    for i, row in enumerate(rows):
        missing = [f for f in LAYOUTS[fmt][0] if f not in row]
        if missing:
            raise DataError(f"{path}: row {i}: field '{missing[0]}' missing (expected {fmt} fields "
                            f"{', '.join(LAYOUTS[fmt][0])})")
        p = _problem(path, i, row, fmt, split)
        if p is None:
            dropped.append(f"{split}-{i}")
            continue
        if p["data_source"] not in nmr.SUPPORTED_DATA_SOURCES:
            raise DataError(f"{path}: row {i}: field 'data_source': {p['data_source']!r} is not judged by "
                            f"new_math_reward; expected one of {sorted(nmr.SUPPORTED_DATA_SOURCES)}")
        if p["id"] in seen:
            raise DataError(f"{path}: field 'id': duplicate problem id {p['id']!r}; expected unique ids "
                            "(unique_id / extra_info.split+index)")
        seen.add(p["id"])
        problems.append(p)
    return fmt, problems, dropped


# ---- MATH-lighteval's columns, as prepare_math.py and parquet2json.py read them

#: Columns of MATH-lighteval (dataset card), all strings.
SOURCE_COLUMNS = ("problem", "level", "type", "solution")
#: ``Level 1`` .. ``Level 5``; ``Level ?`` marks two train problems of the original release.
LEVEL_RE = re.compile(r"Level [1-5?]")
#: What each source column's values must be: (test, what is expected), in column order.
VALUE_CHECKS = {
    "problem": (lambda v: v is not None and v.strip(), "a non-empty string"),
    "level": (lambda v: v is not None and LEVEL_RE.fullmatch(v), "'Level 1'..'Level 5' or 'Level ?'"),
    "type": (lambda v: v is not None, "a string"),
    "solution": (lambda v: v is not None and v.strip(), "a non-empty string"),
}


def bad_rows(label: str, field: str, expected: str, bad: Sequence[int], total: int,
             values: Sequence[object]) -> DataError:
    """DataError naming the file, the field, what was expected, the count and the first bad row."""
    return DataError(f"{label}: field '{field}': expected {expected}; {len(bad)} of {total} rows do not match,"
                     f" first at row {bad[0]}: {one_line(repr(values[bad[0]]), 80)}")


def check_columns(table, label: str) -> dict[str, list]:
    """The MATH-lighteval columns of ``table`` (a pyarrow table) as Python lists, checked: the four
    exist, are strings and hold values as VALUE_CHECKS demands. Raises DataError naming ``label`` (the
    file), the field, the count and the first bad row; a table without rows is reported as such first."""
    import pyarrow as pa

    if table.num_rows == 0:
        raise DataError(f"{label}: no rows (empty file); expected MATH-lighteval rows ({', '.join(SOURCE_COLUMNS)})")
    for name in SOURCE_COLUMNS:
        if name not in table.column_names:
            raise DataError(f"{label}: field '{name}': column missing (expected columns"
                            f" {', '.join(SOURCE_COLUMNS)}; found {', '.join(table.column_names) or 'none'})")
        col_type = table.schema.field(name).type
        if not (pa.types.is_string(col_type) or pa.types.is_large_string(col_type)):
            raise DataError(f"{label}: field '{name}': expected a string column, found {col_type}")
    cols = {name: table.column(name).to_pylist() for name in SOURCE_COLUMNS}
    for name, (ok, expected) in VALUE_CHECKS.items():
        bad = [i for i, v in enumerate(cols[name]) if not ok(v)]
        if bad:
            raise bad_rows(label, name, expected, bad, table.num_rows, cols[name])
    return cols


def reference_answer(solution: str) -> Optional[str]:
    """The answer OpenCompass's MATHDataset keeps from ``solution``: what lies inside the last
    ``\\boxed{...}``, braces balanced. None when there is no ``\\boxed``, the last is not followed by
    a brace (``\\boxed 5``) or never closes. (OpenCompass falls back to the last ``\\fbox`` when there
    is no ``\\boxed``, but then refuses it for not starting with ``\\boxed{``.)"""
    start = solution.rfind("\\boxed")
    if start < 0 or not solution.startswith("\\boxed{", start):
        return None
    depth = 0
    for i in range(start + len("\\boxed"), len(solution)):
        depth += {"{": 1, "}": -1}.get(solution[i], 0)
        if depth == 0:
            return solution[start + len("\\boxed{"):i]
    return None


def split_files(input_dir: Path, split: str) -> list[Path]:
    """Parquet shards of ``split`` under ``input_dir/data`` (``{split}-*.parquet``), sorted; DataError
    naming the expected file when there is none."""
    files = sorted((input_dir / "data").glob(f"{split}-*.parquet"))
    if not files:
        expected = input_dir / "data" / f"{split}-00000-of-00001.parquet"
        raise DataError(f"{expected}: file not found (expected a MATH-lighteval {split} split with string"
                        f" columns {', '.join(SOURCE_COLUMNS)})")
    return files


def load_split(split: str, input_dir: Optional[Path], from_hub: bool) -> list[tuple[str, dict]]:
    """``[(label, columns), ...]`` of one split, a file each, validated, from the MATH-lighteval folder
    ``input_dir`` or the Hub. Raises DataError."""
    if from_hub:
        import datasets  # imported here: only the online path needs it
        import pyarrow as pa

        label = f"hub:{recipe.DEFAULT_DATA_SOURCE}[{split}]"
        try:
            ds = datasets.load_dataset(recipe.DEFAULT_DATA_SOURCE, split=split)
        except Exception as exc:  # network, auth, missing split: one line, not a traceback
            raise DataError(f"{label}: could not load ({one_line(exc, 160)})") from None
        table = pa.Table.from_pandas(ds.to_pandas(), preserve_index=False)
        return [(label, check_columns(table, label))]
    return [(str(p), check_columns(read_parquet(p, "a MATH-lighteval parquet file"), str(p)))
            for p in split_files(input_dir, split)]


def ground_truths(solutions: Sequence[str], label: str, desc: str = "") -> list[str]:
    """Last boxed answer of every solution (``extract_last_boxed``), "" for an empty box; DataError (field
    'solution') naming the count and the first solution without a complete ``\\boxed{}`` / ``\\fbox{}`` /
    ``\\boxed x``."""
    from tqdm import tqdm

    answers = [nmr.extract_last_boxed(s) for s in tqdm(solutions, desc=desc or label, disable=None, leave=False)]
    missing = [i for i, a in enumerate(answers) if a is None]
    if missing:
        raise bad_rows(label, "solution", "a complete \\boxed{...} or \\fbox{...} answer", missing, len(solutions),
                       [s[-80:] for s in solutions])
    return answers  # type: ignore[return-value]
