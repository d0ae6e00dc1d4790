"""Benchmarks: each module runs on its own (``python -m bench.<name>``) and prints figures with
ratios against a baseline measured in the same run. Latest results: ``bench/RESULTS.md``."""
