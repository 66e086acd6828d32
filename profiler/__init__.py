"""profiler: Linux perf profiling and bottleneck analyzer (core layer: the package root)."""

__version__ = "0.1.0"
