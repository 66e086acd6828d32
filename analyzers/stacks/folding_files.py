"""Folding one large perf script file in several processes (analyzers layer).

Cut at sample boundaries, each part folded by its own Collapser (folding.py) with what the
first sample decides (the event, the window's origin) settled up front, the parts' counts added:
the same result as one Collapser over the whole file.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable
from dataclasses import replace

from profiler.analyzers.stacks.folding import Collapser, FoldOptions, collapse_stream

from profiler.inputs.streams import iter_decoded
from profiler.inputs.window import WHOLE

__all__ = ["MAX_WORKERS", "PARALLEL_MIN_BYTES", "collapse_file", "default_workers"]

PARALLEL_MIN_BYTES = 32 << 20
MAX_WORKERS = 4  # past four, merging the parts' counts and starting processes eat the gain


def default_workers() -> int:
    """How many processes fold one large file: the CPUs this process may run on (its affinity
    mask: a taskset, a cpuset cgroup), at most MAX_WORKERS.

    Not the load average: it counts every runnable thread of the host, including other
    containers' and ones about to finish, and lags by a minute, so a fold started on a host
    that was busy a minute ago ran serially. The scheduler shares the CPUs we may use fairly
    with whoever else runs; the affinity mask is the real bound on the speed-up.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_WORKERS))


def _split_points(path: str, parts: int) -> list[int]:
    """Byte offsets that cut the file at sample boundaries (just after a blank line)."""
    size = os.path.getsize(path)
    points = [0]
    with open(path, "rb") as f:
        for k in range(1, parts):
            f.seek(size * k // parts)
            buf = f.read(1 << 20)
            i = buf.find(b"\n\n")
            if i < 0:
                continue
            points.append(f.tell() - len(buf) + i + 2)
    points.append(size)
    return sorted(set(points))


def _fold_range(args: tuple[str, int, int, FoldOptions]) -> tuple[dict[str, int], int, int, int, float | None, float | None]:
    path, start, end, opts = args
    c = Collapser(opts)
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            data = f.read(min(1 << 22, left))
            if not data:
                break
            left -= len(data)
            c.feed(dec.decode(data))
    c.feed(dec.decode(b"", final=True))
    c.close()
    return c.counts, c.samples, c.skipped, c.weird, c.first_time, c.last_time


def collapse_file(path: str, opts: FoldOptions | None = None, workers: int | None = None,
                  on_progress: Callable[[int, int], None] | None = None) -> Collapser:
    """Fold a perf script file, in several processes when it is large, plain text and the host
    has the cores; the result is the same as collapse_stream's (the first sample's event and time
    are read up front, so every part filters the same way). ``on_progress`` hears (bytes folded,
    file size) as parts finish."""
    opts = opts or FoldOptions()
    n = workers if workers is not None else default_workers()
    with open(path, "rb") as f:
        head = f.read(2)
    if n < 2 or head == b"\x1f\x8b" or os.path.getsize(path) < PARALLEL_MIN_BYTES and workers is None:
        size = os.path.getsize(path)
        seen = 0

        def heard(n: int) -> None:
            nonlocal seen
            seen += n
            if on_progress is not None:
                on_progress(min(seen, size), size)

        with open(path, "rb") as f:
            return collapse_stream(f, opts, heard if on_progress is not None and head != b"\x1f\x8b" else None)
    # settle what the first sample decides, so that every part decides the same
    probe = Collapser(replace(opts, window=WHOLE))
    with open(path, "rb") as f:
        for chunk in iter_decoded(f, chunk_size=1 << 16):
            probe.feed(chunk)
            if probe.first_time is not None or probe._event is not None and probe.samples:
                break
    probe.close()
    event = opts.event_filter or probe._event
    window = opts.window.rebased(probe.first_time) if probe.first_time is not None else opts.window
    part_opts = replace(opts, event_filter=event, window=window)
    points = _split_points(path, n if on_progress is None else 4 * n)  # smaller parts: progress as they end
    jobs = [(path, a, b, part_opts) for a, b in zip(points, points[1:], strict=False) if b > a]
    from concurrent.futures import ProcessPoolExecutor

    results = []
    done, size = 0, points[-1]
    with ProcessPoolExecutor(max_workers=min(n, len(jobs))) as pool:
        for job, res in zip(jobs, pool.map(_fold_range, jobs), strict=True):
            results.append(res)
            done += job[2] - job[1]
            if on_progress is not None:
                on_progress(done, size)
    out = Collapser(part_opts)
    out._event = event
    for counts, samples, skipped, weird, first, last in results:
        for k, v in counts.items():
            out.counts[k] = out.counts.get(k, 0) + v
        out.samples += samples
        out.skipped += skipped
        out.weird += weird
        if first is not None and (out.first_time is None or first < out.first_time):
            out.first_time = first
        if last is not None and (out.last_time is None or last > out.last_time):
            out.last_time = last
    return out
