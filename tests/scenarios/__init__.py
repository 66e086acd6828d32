"""The known-cause scenario suite: real workloads, causes made deterministic with cgroup v1 (test layer)."""
