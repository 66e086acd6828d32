"""The load's lines in the text and markdown reports (renderers layer): throughput, latency, the
verdict window, per-transaction costs and dips, worded once for both."""

from __future__ import annotations

from profiler.analyzers.load.analysis import LoadAnalysis, dip_command
from profiler.renderers import formatting as fmt


def _bytes(v: float | None) -> str:
    if v is None:
        return "n/a"
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v:.0f} B"


def _ms(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v * 1000:.0f} µs" if v < 1 else fmt.value(v, "ms")


def lines(la: LoadAnalysis, bundle: str) -> list[str]:
    """One sentence per line, no markup."""
    out: list[str] = []
    tool = la.tool or "the load"
    if la.why:
        out.append(la.why)
    d = la.summary()
    if d["tps"] is not None:
        lat = ", ".join(f"{k[:-3]} {fmt.value(d[k], 'ms')}" for k in ("p95_ms", "p99_ms") if d.get(k) is not None)
        text = f"{tool}: {fmt.value(d['tps'], '/s')} ({d['from']})" + (f", {lat}" if lat else "")
        if "tpmC" in d and d["tpmC"] is not None:
            text += f", tpmC {fmt.value(d['tpmC'])}"
        out.append(text)
    w = d["window"]
    if w["used"]:
        tps = f", {fmt.value(w['tps'], '/s')}" if w["tps"] is not None else ""
        out.append(f"verdict window {w['start']:.1f}-{w['end']:.1f} s{tps}: {w['reason']}")
    elif la.points:
        out.append(w["reason"])
    for p in la.per_tx:
        out.append(f"per transaction, {p.target}: {_ms(p.cpu_ms)} CPU, "
                   f"{fmt.value(p.ios)} block IOs, {_bytes(p.io_bytes)} read+written, "
                   f"{fmt.value(p.ctx_switches)} context switches")
    for dip in la.phases.dips[:5]:
        a, b = dip.start - la.origin, dip.end - la.origin
        out.append(f"throughput dip {a:.1f}-{b:.1f} s: {dip.drop:.0%} below {fmt.value(dip.level, '/s')}; "
                   f"its flame graph: {dip_command(bundle, a, b)}")
    if len(la.phases.dips) > 5:
        out.append(f"... {len(la.phases.dips) - 5} more dips (the JSON report lists them)")
    out.extend(la.notes)
    if la.parsed.unknown:
        out.append(f"{la.parsed.unknown} line{'s' if la.parsed.unknown != 1 else ''} of the load's output not read "
                   f"(not {tool}'s)")
    return out
