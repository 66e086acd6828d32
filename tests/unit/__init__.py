"""Unit tests: pure functions on samples/ and hand-made inputs against golden files; no CLI, no root (a few marked privileged also record live)."""
