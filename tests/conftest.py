import os
import sys

# Integration tests run `vigil` in subprocesses; make sure they use this checkout's venv.
os.environ.setdefault("PYTHONUNBUFFERED", "1")
BIN = os.path.dirname(sys.executable)


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
