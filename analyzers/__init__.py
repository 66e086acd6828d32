"""Analyzers (analyzers layer): pure functions from bundle files to typed, JSON-serialisable results."""
