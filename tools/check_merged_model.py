"""Check a merged Hugging Face model folder before it is used: every tensor in its safetensors
files has the name, shape and dtype its config.json implies, and a forward pass gives finite
logits. merge_checkpoint.sh runs it on the merger's output before that replaces TARGET_DIR.

    python -m tools.check_merged_model MODEL_DIR [--dtype BF16]
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpo_math.io import ArgumentParser, DataError, one_line
from grpo_math.model_checks import safetensors_header

#: verl's FSDP merger casts every tensor to bfloat16 (model_merger/fsdp_model_merger.py, 0.6.0 and 0.9.1)
MERGER_DTYPE = "BF16"
#: the forward pass's prompt: token ids, since the merge checks the tokenizer on its own
PROMPT_LENGTH = 8


def check_merged_model(model_dir: Path, dtype: str = MERGER_DTYPE) -> None:
    """Raise DataError ``FILE: what differed`` unless ``model_dir`` holds the tensors of the model
    its config.json describes (transformers' skeleton on the meta device; of tied weights, such as
    a tied lm_head, one copy is enough, as save_pretrained writes them), each of dtype ``dtype``,
    and a forward pass on CPU gives finite logits."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    model_dir = Path(model_dir)
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise DataError("no *.safetensors file; expected the merged weights")
    try:
        config = AutoConfig.from_pretrained(model_dir)
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # transformers' errors are varied; report them in one line
        raise DataError(f"config.json: no model can be built from it ({one_line(exc)})") from None
    # verl#7610: the FSDP merger concatenates replicated buffers across ranks, a crash or silently
    # wrong shapes; the skeleton's shapes are what config.json implies
    state = skeleton.state_dict(keep_vars=True)
    expected = {k: tuple(v.shape) for k, v in state.items()}
    tied = {}  # one entry per tensor: the names sharing it (a tied lm_head)
    for name, tensor in state.items():
        tied.setdefault(id(tensor), []).append(name)
    found = set()
    for path in files:
        for name, (shape, got) in safetensors_header(path).items():
            if name not in expected:
                raise DataError(f"{path.name}: {name} has shape {shape}, config.json expects no such tensor")
            if shape != expected[name]:
                raise DataError(f"{path.name}: {name} has shape {shape}, config.json expects {expected[name]}")
            if got != dtype:
                raise DataError(f"{path.name}: {name} has dtype {got}, the merger writes {dtype}")
            found.add(name)
    for names in tied.values():
        if not found.intersection(names):
            raise DataError(f"{', '.join(p.name for p in files)}: {names[0]} missing, config.json expects "
                            f"shape {expected[names[0]]}")

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        logits = model(torch.arange(PROMPT_LENGTH)[None] % config.vocab_size).logits
    if not torch.isfinite(logits).all():
        bad = "NaN" if torch.isnan(logits).any() else "infinite"
        raise DataError(f"{', '.join(p.name for p in files)}: a forward pass on {PROMPT_LENGTH} tokens gives {bad} "
                        "logits; expected finite ones")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="check_merged_model.py", description=__doc__.split("\n\n")[0],
        epilog="Exit status: 0 the model passes; 1 it does not, with one line on stderr: "
               "'check_merged_model.py: MODEL_DIR: FILE: what differed'.")
    parser.add_argument("model_dir", type=Path, metavar="MODEL_DIR", help="a merged Hugging Face model folder")
    parser.add_argument("--dtype", default=MERGER_DTYPE,
                        help=f"the safetensors dtype every tensor must have (default {MERGER_DTYPE}, as verl's merger "
                             "writes them)")
    args = parser.parse_args(argv)
    try:
        check_merged_model(args.model_dir, args.dtype)
    except Exception as exc:  # a file that does not even load fails the check too, in one line
        why = exc if isinstance(exc, DataError) else f"{type(exc).__name__}: {exc}"
        print(f"check_merged_model.py: {args.model_dir}: {one_line(why, 300)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
