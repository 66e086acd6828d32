"""Capture orchestration: targets from --pid, the session that runs collectors side by side, host checks (doctor)."""
