"""profiler: Linux perf profiling and bottleneck analyzer (package root)."""

__version__ = "0.1.0"
