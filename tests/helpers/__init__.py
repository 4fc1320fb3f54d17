"""What the tests share that is not a test: helper functions the test files import
(``from helpers.NAME import ...``; tests/ is on sys.path through tests/conftest.py) and the
scripts the tests run in a stack's environment (verl_compose.py, vllm_sync_probe.py)."""
