"""Names preflight.py and health_report.py import from here; everything else imports
grpo_math.io and grpo_math.stacks. Delete once those two import the package."""
from grpo_math.io import ArgumentParser, DataError, one_line, positive_int, write_bytes_atomic  # noqa: F401
from grpo_math.stacks import DOCKERFILE_STACKS, STACK_MATRIX, version_matches  # noqa: F401
