"""perf.data -> the text `perf script -F FIELDS` prints, without perf (formats layer).

The samples come from ``perfstacks.py`` (perf's order, each thread's name), their frames from
``perfsymbolize.py`` (named once per distinct body), and each sample is printed as perf 6.1's
``process_event`` prints it for the fields asked (``comm,pid,tid,cpu,time,period,event,ip,sym,
symoff,dso`` and ``trace`` for sched_switch):

    comm pid/tid [cpu] secs.usecs: period event: trace
    \\t<address, 16 wide> symbol+0xoffset (dso)      one line per frame, then a blank line

The comm is padded to 16 when the event has no call chain (the frame then follows the header
on its line, and no blank line ends the sample); event names are right-aligned to the longest
event name of the file. A merged sample (``merge``) stands for every sample with the same
event, process, thread name (and thread, ``by_tid``) and printed frames: its period is their
total (``count_samples``: their number), so folding the text by period gives the folded
stacks of the whole file.

Samples whose frames cannot be named here the way perf names them (``Frames.unsupported``) are
left to perf script: ``fallback`` receives which samples, and returns perf's text for them
(the caller decides where the smaller perf.data it needs is written); their blocks are put back
in their place in the order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from profiler.formats import perfstacks
from profiler.formats.perfdata import (
    FEAT_TRACING_DATA,
    PerfDataUnsupported,
    PerfFile,
    sample_layout,
    state_letters,
)
from profiler.formats.perfdata_reduce import Merge
from profiler.formats.perfscript_fields import (
    build_ids,
    is_dummy,
    output_type,
    perf_blocks,
    same_sequences,
    sched_switch,
    time_text,
    trace_texts,
    unique_rows,
)
from profiler.formats.perfstacks import Keep, Stacks
from profiler.formats.perfsymbolize import Frames, Symbolizer

KNOWN_FIELDS = ("comm", "pid", "tid", "cpu", "time", "period", "event", "ip", "sym", "symoff", "dso", "trace")
FLUSH = 1 << 20


@dataclass
class Result:
    """What was printed, and what perf script had to name."""

    samples: int = 0  # samples in perf.data (of the events read, kept by ``keep``)
    written: int = 0  # samples printed (merged: one per distinct stack)
    by_perf: int = 0  # samples perf script printed (fallback)
    reasons: dict[str, int] = field(default_factory=dict)  # why, with how many samples
    first_event: str | None = None  # the event of the first sample perf script would print
    target_frames: int = 0  # call-chain entries of ``samples``
    kept: int = 0  # samples printed when ``bound`` thinned them (else ``samples``)
    go_named: int = 0  # frames of stripped Go binaries named from their own function table
    go_unnamed: int = 0


# (pid, tid, time) of the samples perf script must print -> its text for them (the caller writes the
# smaller perf.data it reads, and merges it like ours when ``merge`` is given)
Fallback = Callable[[np.ndarray, np.ndarray, np.ndarray], Iterator[bytes]]


@dataclass
class Prepared:
    """Everything perf script would print, before it is printed: the samples in order, each
    distinct frame line once, which lines each body prints, and perf's own text for the
    samples it must name (``by_perf``)."""

    st: Stacks
    body_idx: np.ndarray
    frames: Frames
    by_perf: np.ndarray
    perf_text: Iterator[bytes] | None
    want: list[str]
    names: list[str]
    width: int
    callchain: dict[int, bool]
    evtypes: dict[int, int]
    trace: Callable[..., dict[str, np.ndarray]] | None
    states: Callable[[int], str] | None

    @functools.cached_property
    def _lines(self) -> tuple[list[str], np.ndarray]:
        return _frame_lines(self.frames, self.want)

    @property
    def lines(self) -> list[str]:
        """Each distinct frame line, as perf prints it ("\t" ... "\n"), made on first use."""
        return self._lines[0]

    @property
    def body_lines(self) -> np.ndarray:
        """The line of each entry: body i is ``lines[k] for k in body_lines[starts[i]:starts[i+1]]``."""
        return self._lines[1]

    @property
    def starts(self) -> np.ndarray:
        return self.frames.starts

    @functools.cached_property
    def symbolic(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Frames told apart by what a folder reads of them, their symbol and module, not their
        address: (one line per distinct (module, symbol), each entry's, each body's symbolic
        body)."""
        fr = self.frames
        sym = fr.sym
        if len(fr.names):  # names of stripped Go frames: one per address, the same name is one symbol
            canon: dict[str, int] = {}
            first_k = np.asarray([canon.setdefault(nm, k) for k, nm in enumerate(fr.names)], np.int64)
            sym = np.where(sym <= -2, -2 - first_k[np.maximum(-2 - sym, 0)], sym)
        # one sort of one key: (module, symbol) packed, symbols offset past the names' negative ids
        span = int(sym.max()) + len(fr.names) + 3 if len(sym) else 1
        _u, first, cls = np.unique((fr.dso + 1) * span + (sym + len(fr.names) + 2), return_index=True,
                                   return_inverse=True)
        cls = cls.ravel()
        return _line_texts(fr, first, self.want), cls, same_sequences(cls, fr.starts)

    def body(self, i: int) -> str:
        return "".join(self.lines[k] for k in self.body_lines[self.starts[i] : self.starts[i + 1]].tolist())


def render(path: str, fields: str, *, pids: set[int] | None = None, keep: Keep | None = None,
           merge: Merge | None = None, go_tables: Callable[[str], Callable[[int], tuple[str, int] | None] | None] | None = None,
           root_of: Callable[[int], str] | None = None, fallback: Fallback | None = None,
           result: Result | None = None, bound: tuple[int, int] | None = None) -> Iterator[bytes]:
    """perf script's text for ``path`` (``--pid``: ``pids``), in chunks. Raises
    PerfDataUnsupported, before yielding anything, for a file perf would print otherwise.
    ``bound`` (samples, call-chain entries): past either, a uniform sample of the samples is
    printed (perfdata_reduce.thinning: by each sample's time and thread, reproducible)."""
    pr = prepare(path, fields, pids=pids, keep=keep, go_tables=go_tables, root_of=root_of, fallback=fallback,
                 result=result, bound=bound)
    return _render(pr, merge, result if result is not None else Result())


def _render(pr: Prepared, merge: Merge | None, res: Result) -> Iterator[bytes]:
    arr = np.asarray(pr.lines, dtype=object)
    starts = pr.starts.tolist()
    bodies = ["".join(arr[pr.body_lines[starts[i] : starts[i + 1]]]) for i in range(len(starts) - 1)]
    st, by_perf, perf_text = pr.st, pr.by_perf, pr.perf_text
    if merge is not None:
        # one sample per distinct printed stack; perf's own text (merged by the caller) after ours
        mine, body_idx = merged(pr, merge)
        res.written = len(mine)
        if perf_text is not None and by_perf[0]:  # the first sample is perf's: its event is the one folded
            yield from perf_text
            perf_text = None
        yield from _samples(pr, mine, body_idx, bodies, np.zeros(len(mine), bool), None)
        if perf_text is not None:
            yield from perf_text
        return
    res.written = len(st)
    yield from _samples(pr, st, pr.body_idx, bodies, by_perf, perf_blocks(perf_text) if perf_text is not None else None)


def items(pr: Prepared, merge: Merge | None, res: Result) -> Iterator[tuple[str, int, Callable[[], list[int]], list[str]] | bytes]:
    """What :func:`_render` prints, in the same order, as samples already cut: (header line,
    body index, its frame lines' indices in ``pr.lines``, ``pr.lines``) for a sample with a call
    chain, the text itself otherwise (a sample without one is one line; perf's own text comes
    as its blocks)."""
    st, by_perf, perf_text = pr.st, pr.by_perf, pr.perf_text
    starts = pr.starts
    if merge is not None and merge.symbolic:
        lines, bl, body_sym = pr.symbolic
        key_of = body_sym.tolist()
    else:
        lines, bl, key_of = pr.lines, pr.body_lines, None

    def body_lines(b: int) -> Callable[[], list[int]]:
        return lambda: bl[starts[b] : starts[b + 1]].tolist()

    def ours(sel: Stacks, body_idx: np.ndarray,
             perf: np.ndarray) -> Iterator[tuple[str, int, Callable[[], list[int]], list[str]] | bytes]:
        cc = np.asarray([pr.callchain[e] and "ip" in pr.want for e in range(len(pr.names))], bool)[sel.event].tolist()
        blocks = perf_blocks(perf_text) if perf_text is not None and perf.any() else None
        for h, b, c, p in zip(headers(pr, sel), body_idx.tolist(), cc, perf.tolist(), strict=True):
            if p:
                assert blocks is not None
                yield next(blocks, b"")
            elif c:
                yield h, b if key_of is None else key_of[b], body_lines(b), lines
            else:
                yield (h + (" " + pr.body(b).lstrip("\t") if "ip" in pr.want else "\n")).encode("utf-8", "surrogateescape")

    if merge is not None:
        mine, body_idx = merged(pr, merge)
        res.written = len(mine)
        if perf_text is not None and by_perf[0]:
            yield from perf_blocks(perf_text)
            perf_text = None
        yield from ours(mine, body_idx, np.zeros(len(mine), bool))
        if perf_text is not None:
            yield from perf_blocks(perf_text)
        return
    res.written = len(st)
    yield from ours(st, pr.body_idx, by_perf)


def merged(pr: Prepared, merge: Merge) -> tuple[Stacks, np.ndarray]:
    """The samples perf script does not name, one per distinct printed stack (``merge``; symbolic:
    one per distinct stack of symbols and modules)."""
    body_idx = pr.body_idx[~pr.by_perf]
    key = None
    if merge.symbolic:
        from profiler.formats.perfdata import U64

        key = pr.symbolic[2][body_idx].astype(U64) + U64(0x7F4A7C15)
    return _merged(pr.st.select(~pr.by_perf), body_idx, merge, key)


def prepare(path: str, fields: str, *, pids: set[int] | None = None, keep: Keep | None = None,
            go_tables: Callable[[str], Callable[[int], tuple[str, int] | None] | None] | None = None,
            root_of: Callable[[int], str] | None = None, fallback: Fallback | None = None,
            result: Result | None = None, bound: tuple[int, int] | None = None) -> Prepared:
    """Read and name everything :func:`render` prints (its arguments)."""
    res = result if result is not None else Result()
    want = fields.split(",")
    if any(w not in KNOWN_FIELDS for w in want):
        raise PerfDataUnsupported(f"fields {fields} (only {','.join(KNOWN_FIELDS)} are printed without perf)")
    from profiler.formats import kallsyms

    if kallsyms.vmlinux() is not None:
        raise PerfDataUnsupported(f"perf reads kernel symbols from {kallsyms.vmlinux()}")
    with PerfFile(path) as f:
        bids, kernel_bid = build_ids(f)
        names = [ev.name for ev in f.events]
        has_tracing = FEAT_TRACING_DATA in f.features
        trace = sched_switch(f) if "trace" in want and has_tracing else None
        checked: set[str] = set()
        for ev in f.events:
            # perf checks the first event of each kind (hardware, software, tracepoint...), dummies aside
            if is_dummy(ev) or output_type(ev.type) in checked:
                continue
            checked.add(output_type(ev.type))
            lay = sample_layout(ev.sample_type)
            for fld, ok in (("period", lay.period >= 0), ("cpu", lay.cpu >= 0), ("tid", lay.tid >= 0),
                            ("pid", lay.tid >= 0), ("time", lay.time >= 0)):
                if fld in want and not ok:
                    raise PerfDataUnsupported(f"event {ev.name} has no {fld} field (perf script refuses -F {fields})")
            if "trace" in want and ev.type == 2 and (trace is None or not ev.name.endswith("sched_switch")):
                raise PerfDataUnsupported(f"tracepoint {ev.name} payload (only sched_switch is printed without perf)")
        states = state_letters(f.tp_flags("sched_switch")) if trace is not None else None
        callchain = {ev.index: bool(ev.sample_type & 32) for ev in f.events}
        evtypes = {ev.index: ev.type for ev in f.events}
        if not all(ev.exclude_kernel for ev in f.events):
            kallsyms.prefetch(kallsyms.path_for(kernel_bid))
    width = max((len(n) for n in names), default=0)
    keep_all = keep
    if pids is not None:
        parr = np.asarray(sorted(pids), np.int64)

        def keep_all(pid: np.ndarray, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
            ok: np.ndarray = np.isin(pid, parr)
            return ok & keep(pid, tid, t) if keep is not None else ok

    st = perfstacks.read(path, keep=keep_all, tracepoint=trace)
    res.samples = res.kept = len(st)
    res.target_frames = int(st.nr.sum())
    if bound is not None and len(st):
        fraction = min(1.0, bound[0] / max(len(st), 1), bound[1] / max(res.target_frames, 1))
        if fraction < 1.0:
            from profiler.formats.perfdata_reduce import thinning

            st = st.select(thinning(fraction)(st.pid, st.tid, st.time))
            res.kept = len(st)
    reps, body_idx = _bodies(st)
    starts, flat = perfstacks.chains(path, st, reps)
    sym = Symbolizer(st, bids, root_of, go_tables, kernel_bid)
    frames = sym.frames(reps, starts, flat)
    raw_ip = ~np.asarray([callchain[int(e)] for e in st.event[reps].tolist()], bool)
    if raw_ip.any():  # without a call chain perf prints the sample's own address
        lens = np.diff(frames.starts)
        per = np.repeat(raw_ip, lens)
        ips = flat[np.repeat(starts[:-1], lens) + 1] if len(flat) else flat
        frames.addr = np.where(per, ips, frames.addr)
    _go_counts(frames, body_idx, res)
    by_perf = np.zeros(len(st), bool)
    if frames.unsupported:
        bad = np.asarray(sorted(frames.unsupported), np.int64)
        by_perf = np.isin(body_idx, bad)
        counts = np.bincount(body_idx[by_perf], minlength=len(reps))
        for b, why in frames.unsupported.items():
            res.reasons[why] = res.reasons.get(why, 0) + int(counts[b])
        res.by_perf = int(by_perf.sum())
        if fallback is None:
            raise PerfDataUnsupported("; ".join(sorted(res.reasons)))
    res.first_event = names[int(st.event[0])] if len(st) else None
    perf_text = fallback(st.pid[by_perf], st.tid[by_perf], st.time[by_perf]) if by_perf.any() and fallback else None
    return Prepared(st, body_idx, frames, by_perf, perf_text, want, names, width, callchain,
                    evtypes, trace, states)


def _go_counts(fr: Frames, body_idx: np.ndarray, res: Result) -> None:
    """Frames of stripped Go binaries named from their function tables, and left unnamed, over
    every printed sample (what the collectors' stats have counted since they named them)."""
    go = np.asarray([d.go is not None for d in fr.dsos] + [False], bool)
    if not go.any() or not len(fr.dso):
        return
    in_go = go[np.where(fr.dso >= 0, fr.dso, len(fr.dsos))]
    body_of = np.repeat(np.arange(len(fr.starts) - 1), np.diff(fr.starts))
    per_sample = np.bincount(body_idx, minlength=len(fr.starts) - 1)
    weight = per_sample[body_of]
    res.go_named = int(weight[in_go & (fr.sym <= -2)].sum())
    res.go_unnamed = int(weight[in_go & (fr.sym == -1)].sum())




def _merged(st: Stacks, body_idx: np.ndarray, m: Merge, body_key: np.ndarray | None = None) -> tuple[Stacks, np.ndarray]:
    """One sample per (event, process, thread name, [thread], body), the first in order, its
    period the total (or the count); and its body index. ``body_key``: each sample's body told
    apart otherwise than by its call chain's hash."""
    from profiler.formats.perfdata import U64
    from profiler.formats.perfdata_reduce import _mix

    with np.errstate(over="ignore"):
        who = st.comm.astype(U64) * U64(0x9E3779B97F4A7C15)
        if m.by_tid:
            who = who ^ _mix(st.tid.astype(U64) + U64(0x51))
        k = _mix((st.body if body_key is None else _mix(body_key)) ^ _mix(st.event.astype(U64) * U64(0xD6E8FEB86659FD93)
                                                                         + who))
    _uk, first, inv = np.unique(k, return_index=True, return_inverse=True)
    w = np.ones(len(st), np.int64) if m.count_samples else st.period
    sums = np.bincount(inv.ravel(), weights=w.astype(np.float64)).astype(np.int64)
    order = np.argsort(first, kind="stable")
    out = st.select(first[order])
    out.period = sums[order]
    return out, body_idx[first[order]]


def _bodies(st: Stacks) -> tuple[np.ndarray, np.ndarray]:
    """One representative sample per body key, and each sample's body index."""
    _, first, inv = np.unique(st.body, return_index=True, return_inverse=True)
    return first, inv.ravel()


def _frame_lines(fr: Frames, want: list[str]) -> tuple[list[str], np.ndarray]:
    """Each distinct (address, dso, symbol) frame line as perf prints it (ip, sym, symoff, dso as
    asked), and the line of each entry."""
    if not len(fr.addr):
        return [], np.zeros(0, np.int64)
    first, inv = unique_rows(fr.addr.astype(np.int64), fr.dso, fr.sym)
    return _line_texts(fr, first, want), inv


def _line_texts(fr: Frames, first: np.ndarray, want: list[str]) -> list[str]:
    """The frame lines of the entries ``first``, as perf prints them."""
    ip, sym, symoff, dso = "ip" in want, "sym" in want, "symoff" in want, "dso" in want
    dsos = fr.dsos
    lines: list[str] = []
    for a, d, s, o in zip(fr.addr[first].tolist(), fr.dso[first].tolist(), fr.sym[first].tolist(),
                          fr.off[first].tolist(), strict=True):
        parts = ["\t"]
        if ip:
            parts.append(f"{a:16x}")
        if sym:
            if s >= 0:
                t = dsos[d].table
                assert t is not None
                name = t.name(s)
                if "\t" in name:  # a kernel module's symbol: perf cuts the module off
                    name = name[: name.find("\t")]
            elif s <= -2:
                name = fr.names[-2 - s]
            else:
                name = "[unknown]"
            parts.append(" " + name + (f"+{o:#x}" if symoff and s != -1 else ""))
        if dso:
            parts.append(f" ({dsos[d].name if d >= 0 else '[unknown]'})")
        parts.append("\n")
        lines.append("".join(parts))
    return lines






def headers(pr: Prepared, st: Stacks) -> list[str]:
    """Each sample's header line as perf prints it (without its newline)."""
    n = len(st)
    if not n:
        return []
    want, names = pr.want, pr.names
    ip_f = "ip" in want
    cc = np.asarray([pr.callchain[e] and ip_f for e in range(len(names))], bool)[st.event]
    # "comm pid/tid [cpu] ": one string per distinct (comm, pid, tid, cpu, chain?)
    first, inv = unique_rows(st.comm, st.pid, st.tid, st.cpu, cc.astype(np.int64))
    heads = []
    for comm, pid, tid, cpu, chain in zip(st.comm[first].tolist(), st.pid[first].tolist(), st.tid[first].tolist(),
                                          st.cpu[first].tolist(), cc[first].tolist(), strict=True):
        h = []
        if "comm" in want:
            h.append(f"{st.comms[comm]} " if chain else f"{st.comms[comm]:>16} ")
        if "pid" in want and "tid" in want:
            h.append(f"{pid:5d}/{tid:<5d} ")
        elif "pid" in want:
            h.append(f"{pid:5d} ")
        elif "tid" in want:
            h.append(f"{tid:5d} ")
        if "cpu" in want:
            h.append(f"[{cpu:03d}] ")
        heads.append("".join(h))
    head = np.asarray(heads, dtype=object)[inv].tolist()
    times = time_text(st.time) if "time" in want else [""] * n
    periods = [f"{p:10d} " for p in st.period.tolist()] if "period" in want else [""] * n
    ev_text = [f"{nm:>{pr.width}}: " if "event" in want else "" for nm in names]
    evs = [ev_text[e] for e in st.event.tolist()]
    traces = (trace_texts(st, pr.trace, pr.states, pr.evtypes) if "trace" in want and pr.trace is not None
              else [""] * n)
    return list(map("".join, zip(head, times, periods, evs, traces, strict=True)))


def _samples(pr: Prepared, st: Stacks, body_idx: np.ndarray, bodies: list[str], by_perf: np.ndarray,
             perf_blocks: Iterator[bytes] | None) -> Iterator[bytes]:
    """Each sample's text, in order; perf's blocks where ``by_perf``."""
    n = len(st)
    if not n:
        return
    ip_f = "ip" in pr.want
    cc = np.asarray([pr.callchain[e] and ip_f for e in range(len(pr.names))], bool)[st.event].tolist()
    tails = []
    for b, c in zip(body_idx.tolist(), cc, strict=True):
        if not ip_f:
            tails.append("\n")
        elif c:
            tails.append("\n" + bodies[b] + "\n")
        else:
            tails.append(" " + bodies[b].lstrip("\t"))
    perf_rows = by_perf.tolist()
    out: list[str] = []
    size = 0
    for i, text in enumerate(map("".join, zip(headers(pr, st), tails, strict=True))):
        if perf_rows[i]:
            if out:
                yield "".join(out).encode("utf-8", "surrogateescape")
                out, size = [], 0
            assert perf_blocks is not None
            yield next(perf_blocks, b"")
            continue
        out.append(text)
        size += len(text)
        if size > FLUSH:
            yield "".join(out).encode("utf-8", "surrogateescape")
            out, size = [], 0
    if out:
        yield "".join(out).encode("utf-8", "surrogateescape")


