"""Capture orchestration (capture layer): targets from --pid, the session that runs collectors side by side, host checks (doctor)."""
