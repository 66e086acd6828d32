"""speedscope files out (renderers layer): any capture's stacks as a speedscope "sampled" profile.

speedscope (www.speedscope.app, or its offline build) opens the JSON: shared frames, and one
profile of ``type: "sampled"`` whose ``samples`` list each stack as frame indices from the root
to the leaf, with one ``weights`` entry per stack in ``unit`` (nanoseconds, microseconds, or
``none`` for counts). Written from the format's published schema
(https://www.speedscope.app/file-format-schema.json).
"""

from __future__ import annotations

import json

from profiler import __version__
from profiler.analyzers.stacks.export import StackProfile

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
_UNITS = {"nanoseconds": "nanoseconds", "microseconds": "microseconds", "milliseconds": "milliseconds",
          "seconds": "seconds", "bytes": "bytes"}


class SpeedscopeWriter:
    model = StackProfile
    formats = ("speedscope",)
    extensions = (".speedscope.json", ".speedscope")

    def render(self, model: StackProfile, options: None = None) -> str:
        frames: dict[str, int] = {}
        samples: list[list[int]] = []
        weights: list[int] = []
        for stack, value in model.stacks():
            samples.append([frames.setdefault(f, len(frames)) for f in stack])
            weights.append(value)
        name = model.name or f"{model.sample_type} ({model.unit})"
        doc = {
            "$schema": SCHEMA,
            "shared": {"frames": [{"name": f} for f in frames]},
            "profiles": [{"type": "sampled", "name": name, "unit": _UNITS.get(model.unit, "none"),
                          "startValue": 0, "endValue": sum(weights), "samples": samples, "weights": weights}],
            "name": name, "activeProfileIndex": 0, "exporter": f"profiler {__version__}",
        }
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n"


WRITER = SpeedscopeWriter()
