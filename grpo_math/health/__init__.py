"""A verl GRPO run's health from its logs: read.py -> rules.py -> report.py, figures.py; the CLI is
health_report.py."""
