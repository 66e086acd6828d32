"""The window and per-interval forms read in one pass (rate_both, histogram_quantile_both) against
each form computed on its own: the same numbers, on scrapes with a counter reset, a NaN, a series
that appears late, two scrapes at the same time and scrapes out of order."""

from __future__ import annotations

import math
import random

from profiler.analyzers.server import series as S
from profiler.analyzers.server.prometheus import parse_text

BOUNDS = ["0.001", "0.01", "0.1", "1", "+Inf"]


def _text(rng: random.Random, i: int) -> str:
    lines = []
    for t in ("get", "put", "scan"):
        n = rng.randrange(0, 1000) * (i + 1)
        if t == "scan" and i == 1:
            n = 0  # a reset
        lines.append(f'req_total{{type="{t}",store="1"}} {n}')
        lines.append(f'cache{{type="{"hit" if t == "get" else "miss"}",db="kv"}} {n}')
        cum = 0
        for le in BOUNDS:
            cum += rng.randrange(0, 50) * (i + 1)
            lines.append(f'lat_bucket{{type="{t}",le="{le}"}} {cum if not (t == "put" and i == 2) else "NaN"}')
    if i >= 2:
        lines.append('req_total{type="late",store="2"} 7')
    return "\n".join(lines)


def _scrapes(times: list[float], seed: int) -> list[S.Scrape]:
    rng = random.Random(seed)
    return [S.Scrape(t, parse_text(_text(rng, i))) for i, t in enumerate(times)]


def _eq(a: object, b: object) -> bool:
    return repr(a) == repr(b)  # NaN, None and order included


def test_the_one_pass_forms_equal_the_separate_ones() -> None:
    for times in ([100.0, 110.0, 120.0, 130.0], [100.0, 110.0, 110.0, 125.0], [100.0, 90.0, 120.0], [100.0],
                  [], [100.0, 100.0]):
        for seed in range(5):
            sc = _scrapes(times, seed)
            for by, where in (((), None), (("type",), None), (("store",), {"type": ("get", "late")}),
                              (("type", "le"), {"db": "kv"})):
                for name in ("req_total", "cache"):
                    both = S.rate_both(sc, name, by, where)
                    assert _eq(both, (S.rate(sc, name, by, where), *S.rate_series(sc, name, by, where)))
                for q in (0.5, 0.99):
                    both_q = S.histogram_quantile_both(sc, "lat", q, by, where)
                    alone = (S.histogram_quantile(sc, "lat", q, by, where),
                             *S.histogram_quantile_series(sc, "lat", q, by, where))
                    assert _eq(both_q, alone)
    sc = _scrapes([100.0, 110.0, 120.0], 1)
    window, times_, series = S.rate_both(sc, "req_total", ("type",))
    assert times_ == [105.0, 115.0] and set(window) == set(series) and not math.isnan(sum(window.values()))
