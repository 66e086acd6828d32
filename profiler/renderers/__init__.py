"""Renderers (output layer): one module per output format, each ``render(model) -> str``."""
