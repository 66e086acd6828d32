"""Jinja2 templates and inlined assets for the reports and SVG outputs (renderers layer; loaded via importlib.resources)."""
