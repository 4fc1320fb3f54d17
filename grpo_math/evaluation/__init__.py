"""evaluate.py's machinery, in a problem's order: ``data`` (a MATH file's problems, chat turns and
references), ``generate``, a protocol's judge and summary (``recipe``, ``opencompass``), ``run`` (the
resumable loop); ``rescore`` re-judges an OpenCompass run; ``summary`` what both protocols' reports share."""
