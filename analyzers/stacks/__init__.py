"""Stacks (analyzers layer): perf script samples, folding, demangling, the flame graph model, off-CPU and sub-second views."""
