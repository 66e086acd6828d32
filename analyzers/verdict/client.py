"""The load client's own figures as verdict evidence (analyzers layer).

When the capture ran the load (``profiler run -- sysbench ...``, docs/load.md), the client says
how fast its requests came back: throughput, its latency percentile, and for sysbench how many
threads it ran. Over the verdict's window (the warm-up left out), one record: the outermost
measure of request time, which the servers' own phases (analyzers.server.requests) divide.
"""

from __future__ import annotations

from profiler.analyzers.load.analysis import LoadAnalysis
from profiler.analyzers.verdict.model import ClientEvidence


def client_evidence(la: LoadAnalysis | None, window: tuple[float, float] | None) -> ClientEvidence | None:
    """The client's throughput, latency and threads over the window (its intervals inside it, else
    its summary), or None without a parsed load."""
    if la is None or la.status != "ok" or la.tool is None:
        return None
    key = la.latency_key
    pts = [p for p in la.points if window is None or (p.start >= window[0] - 1e-6 and p.end <= window[1] + 1e-6)]
    lat = [p.interval.latency_ms[key] for p in pts if key is not None and key in p.interval.latency_ms]
    threads = [p.interval.threads for p in pts if p.interval.threads]
    latency: float | None = sum(lat) / len(lat) if lat else None
    source = f"{len(lat)} of its reports in the window" if lat else ""
    summary = la.parsed.summary
    if latency is None and summary is not None and key is not None and key in summary.latency_ms:
        latency, source = summary.latency_ms[key], "its summary"
    return ClientEvidence(tool=la.tool, tps=la.tps, latency_key=key, latency_ms=latency,
                          threads=max(threads) if threads else None, source=source)
