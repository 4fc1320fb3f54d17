"""evaluate.py's machinery, in a problem's order: ``data`` (a MATH file's problems, chat turns and
references), ``generate``, ``recipe`` (the judges and the summary), ``run`` (the resumable loop)."""
