"""Tests of the profiler (unit, CLI, end-to-end, scenarios)."""
