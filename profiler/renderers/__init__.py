"""Renderers (renderers layer): models in, documents out.

protocol.py says what a renderer is (``render(model, options) -> str``) and how one is picked;
registry.py lists them all; jinja_env.py is the one template environment. Reports of an
Analysis: report_{html,markdown,json,text}.py; pictures: flamegraph_svg.py, heatmap_svg.py.
"""
