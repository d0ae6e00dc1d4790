"""Benchmarks: each module runs on its own (``python -m bench.<name>``) and prints figures with
ratios against a baseline measured in the same run. Latest results: ``bench/RESULTS.md``."""

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch_dir(prefix: str) -> Path:
    """A private temporary directory removed when the bench exits (also after an error or
    Ctrl-C): a bench's streams take gigabytes, and a run left behind fills the disk."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path
