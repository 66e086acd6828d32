"""Jinja2 templates and inlined assets for the HTML report and SVG outputs (loaded via importlib.resources)."""
