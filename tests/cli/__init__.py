"""CLI tests: the verbs run in-process (profiler.cli.main returns the exit code) on samples/ and hand-made inputs."""
