"""End-to-end tests on real processes each test starts itself (mostly marked privileged: root, perf, tracefs), and the report in a real browser."""
