"""evaluate.py's machinery, in the order a problem goes through it: ``data`` (read a MATH file,
build each problem's chat turns and reference), ``generate`` (vLLM or transformers), a protocol's
judge and summary (``recipe``: the training reward and a strict check; ``opencompass``:
math_gen_a58d9d reproduced), ``run`` (the resumable loop and its files). ``rescore`` re-judges a
real OpenCompass run's predictions; ``summary`` holds what both protocols' reports share."""
