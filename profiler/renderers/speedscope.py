"""speedscope files out (renderers layer): any capture's stacks as speedscope "sampled" profiles.

speedscope (www.speedscope.app, or its offline build) opens the JSON: shared frames, and
profiles of ``type: "sampled"`` whose ``samples`` list each stack as frame indices from the root
to the leaf, with one ``weights`` entry per sample in ``unit`` (nanoseconds, microseconds, or
``none`` for counts). When the input has times (a bundle, perf script, perf.data), there is one
profile per thread with its samples in time order, so speedscope's time-order view shows what
each thread did when; otherwise one profile of the merged stacks. Written from the format's
published schema (https://www.speedscope.app/file-format-schema.json).
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
        unit = _UNITS.get(model.unit, "none")
        name = model.name or f"{model.sample_type} ({model.unit})"
        stack_ids: dict[str, list[int]] = {}

        def ids(stack: str) -> list[int]:
            got = stack_ids.get(stack)
            if got is None:
                got = stack_ids[stack] = [frames.setdefault(f, len(frames)) for f in stack.split(";")]
            return got

        profiles = []
        if model.timed:
            per: dict[str, tuple[list[list[int]], list[int]]] = {}
            for thread, _t, stack, value in model.timed:  # time order
                samples, weights = per.setdefault(thread, ([], []))
                samples.append(ids(stack))
                weights.append(value)
            for thread in sorted(per, key=lambda k: -sum(per[k][1])):
                samples, weights = per[thread]
                profiles.append({"type": "sampled", "name": thread, "unit": unit, "startValue": 0,
                                 "endValue": sum(weights), "samples": samples, "weights": weights})
        else:
            merged: list[list[int]] = []
            totals: list[int] = []
            for frame_names, value in model.stacks():
                merged.append([frames.setdefault(f, len(frames)) for f in frame_names])
                totals.append(value)
            profiles.append({"type": "sampled", "name": name, "unit": unit, "startValue": 0,
                             "endValue": sum(totals), "samples": merged, "weights": totals})
        doc = {
            "$schema": SCHEMA,
            "shared": {"frames": [{"name": f} for f in frames]},
            "profiles": profiles,
            "name": name, "activeProfileIndex": 0, "exporter": f"profiler {__version__}",
        }
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n"


WRITER = SpeedscopeWriter()
