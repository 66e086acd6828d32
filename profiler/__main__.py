"""Entry point for `python -m profiler` (CLI layer)."""

from profiler.cli import main

raise SystemExit(main())
