"""toolrank's benchmarks: scripts that measure it (none of them a test), and :mod:`benchmarks.common`.

Each script runs as a file or as a module from the repository root::

    python benchmarks/retrieval_speed.py --quick
    python -m benchmarks.retrieval_speed --quick

Not part of the wheel. Every result file a script writes carries :func:`benchmarks.common.environment_stamp`.
"""
