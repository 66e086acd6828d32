"""The procfs sampler (collectors layer): /proc and cgroup files read in-process, no perf, no privileges."""
