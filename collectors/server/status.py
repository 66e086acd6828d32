"""The server-status collector (collectors layer): what each target's HTTP status port says about it.

TiDB, PD, TiKV and etcd serve their own introspection over HTTP: Prometheus ``/metrics`` (what
Grafana draws) and, for the Go servers, ``/debug/pprof/`` (goroutine, mutex, block and CPU
profiles). This collector finds that port for each target and, over the capture window and on
the capture clock, takes:

- ``/metrics`` at the start, every ``status_interval`` seconds and at the end
  (-> ``server-metrics.jsonl.gz``, one JSON record per scrape, the body verbatim);
- the goroutine profile at the start, the middle and the end (``debug=0`` pprof, or the
  ``debug=2`` text where that is all there is) -> ``server-PID-goroutine-N.pb.gz``;
- the mutex and block profiles at the start and the end (their difference is the window's;
  empty when the server did not turn them on) -> ``server-PID-mutex-start.pb.gz`` ...;
- the server's own CPU profile over the window, a cross-check of perf's
  (``/debug/pprof/profile?seconds=N``, when the duration is known) -> ``server-PID-cpu.pb.gz``;
- an index of every request, its time, status, size and error -> ``server-status.jsonl``.

Finding the port (collectors/server/ports.py): the known flags and defaults of each server
kind, else the target's own listening TCP sockets, each probed here for ``/metrics`` and
``/debug/pprof/``. Only this host's addresses are used unless the user names a URL with
``--status-url``; a target in another network namespace (a container) is reached from a thread
that joins that namespace (root).

Nothing the server returns is trusted (collectors/server/bounded_http.py): every request has a time
budget and a size cap, HTML and other non-profile answers are refused, and every failure is
counted by kind in the collector's stats (``failures``) and named in the index. A target without
such a port is skipped with the reason; the capture and the other collectors are never held up
beyond one request's budget.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import urlsplit

from profiler.collectors.base import CaptureContext, CollectorBase, Probe, Target
from profiler.collectors.server.bounded_http import (
    HTML,
    NOT_PPROF,
    NOT_TEXT,
    REFUSED,
    TIMEOUT,
    TOO_LARGE,
    Reply,
    fail_reply,
    fetch,
    looks_exposition,
    looks_html,
    looks_pprof,
)
from profiler.collectors.server.ports import (
    LISTENING,
    Candidate,
    Endpoint,
    as_url,
    flag_candidates,
    join_netns,
    listening_sockets,
    local_addresses,
    netns_of,
    reachable,
    server_kind,
    socket_candidates,
    speaks_first,
)

from profiler.bundle import FAILED, OK, PARTIAL, SKIPPED, CollectorRecord, members

INDEX = members.SERVER_STATUS
METRICS = members.SERVER_METRICS

PROBE_TIMEOUT = 2.0  # s, each probe request
METRICS_TIMEOUT = 5.0
PROFILE_TIMEOUT = 10.0
GIVE_UP_AFTER = 2  # consecutive timeouts or refusals after which a port is left alone
METRICS_MAX = members.SERVER_METRICS_BODY_MAX  # bytes of one /metrics body (decompressed)
PROFILE_MAX = 64 << 20  # bytes of one profile
PROBE_MAX = 256 << 10
MAX_CANDIDATES = 16
END_BUDGET = 10.0  # s the end-of-capture requests may take in all, once the capture is asked to stop
MIDDLE_EVERY = 60.0  # s between goroutine profiles when the duration is not known

# --------------------------------------------------------------------------- the collector


@dataclass
class _Plan:
    """What one target's worker thread does."""

    target: Target
    kind: str | None
    candidates: list[Candidate]
    refused: list[str]
    endpoint: Endpoint | None = None
    thread: threading.Thread | None = None
    seq: dict[str, int] = field(default_factory=dict)
    misses: int = 0  # consecutive timeouts/refusals
    gave_up: str = ""  # why its port is no longer asked


def parse_status_urls(values: list[str]) -> dict[int | None, list[str]]:
    """``--status-url [PID=]URL`` values: pid (None: every target) -> URLs."""
    out: dict[int | None, list[str]] = {}
    for v in values:
        head, sep, rest = v.partition("=")
        if sep and head.strip().isdigit() and "://" not in head:
            out.setdefault(int(head), []).append(rest.strip())
        else:
            out.setdefault(None, []).append(v.strip())
    return out


class ServerStatusCollector(CollectorBase):
    """Collector protocol: one worker thread per target that has a status port."""

    name = "server-status"
    backend = "http"

    def __init__(self, urls: dict[int | None, list[str]] | None = None) -> None:
        self.urls = urls or {}  # --status-url: pid (None: every target) -> URLs
        self.plans: list[_Plan] = []
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._index: IO[bytes] | None = None
        self._metrics: IO[bytes] | None = None
        self._stack: contextlib.ExitStack | None = None
        self.started: float | None = None
        self.requests = 0
        self.ok = 0
        self.bytes = 0
        self.failures: dict[str, int] = {}
        self.files: list[str] = [INDEX]
        self.errors: list[str] = []
        self.duration: float | None = None
        self.interval = 5.0
        self.cpu_profile = True
        self._cpu_threads: list[threading.Thread] = []
        self._end_deadline: float | None = None
        self._closed = False

    # ------------------------------------------------------------------ protocol
    def _plan(self, t: Target, local: set[str]) -> _Plan:
        kind = server_kind(t.comm, list(t.cmdline), t.kind)
        named = [Candidate(u, "--status-url") for u in self.urls.get(t.pid, []) + self.urls.get(None, [])]
        cands: list[Candidate] = []
        refused: list[str] = []
        own, not_asked = socket_candidates(t.pid, kind)
        if not_asked:
            refused.append(not_asked)
        for c in flag_candidates(kind, list(t.cmdline), listening_sockets(t.pid)) + own:
            url, why = reachable(c.url, local)
            if url is None:
                refused.append(why)
                continue
            if all(x.url != url for x in cands):
                cands.append(Candidate(url, c.source))
        named = [Candidate(u, c.source) for c in named if (u := as_url(c.url))]
        return _Plan(t, kind, (named + cands)[:MAX_CANDIDATES], refused)

    def probe(self, ctx: CaptureContext) -> Probe:
        if ctx.options.status_urls:
            self.urls = parse_status_urls(list(ctx.options.status_urls))
        local = local_addresses()
        self.plans = [self._plan(t, local) for t in ctx.targets]
        if not any(p.candidates for p in self.plans):
            why = "; ".join(f"{p.target.comm} (pid {p.target.pid}) names no status address"
                            + (f" ({'; '.join(p.refused)})" if p.refused else " and listens on no TCP port")
                            for p in self.plans)
            return Probe(False, f"no HTTP status port to ask: {why} (name one with --status-url http://HOST:PORT)",
                         "name one with --status-url http://HOST:PORT")
        return Probe(True)

    def argv(self, ctx: CaptureContext) -> list[str]:
        return []

    def size(self) -> int:
        return self.bytes

    def start(self, ctx: CaptureContext) -> None:
        if not self.plans:
            self.plans = [self._plan(t, local_addresses()) for t in ctx.targets]
        self.duration = ctx.options.duration
        self.interval = max(0.5, float(ctx.options.status_interval or 5.0))
        self.cpu_profile = bool(ctx.options.server_cpu_profile)
        self._stack = contextlib.ExitStack()
        self._index = self._stack.enter_context(ctx.writer.open_member(INDEX))
        self._metrics = self._stack.enter_context(ctx.writer.open_member(METRICS))
        self.files.append(METRICS)
        self.started = time.monotonic()
        self.writer = ctx.writer
        for plan in self.plans:
            if not plan.candidates:
                continue
            plan.thread = threading.Thread(target=self._run, args=(plan,), name=f"profiler-status-{plan.target.pid}",
                                           daemon=True)
            plan.thread.start()

    def request_stop(self) -> None:
        if self._end_deadline is None:
            self._end_deadline = time.monotonic() + END_BUDGET
        self.stop_event.set()

    def _timeout(self, default: float) -> float:
        """A request's time budget: its own, cut to what is left of the end budget once stopping."""
        if self._end_deadline is None:
            return default
        return max(0.2, min(default, self._end_deadline - time.monotonic()))

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = CollectorRecord(name=self.name, backend=self.backend, argv=[], started=self.started)
        self.request_stop()
        deadline = (self._end_deadline or time.monotonic()) + 1.0
        for plan in self.plans:
            if plan.thread is not None:
                plan.thread.join(timeout=max(0.1, deadline - time.monotonic()))
        for th in self._cpu_threads:
            th.join(timeout=max(0.1, deadline - time.monotonic()))
        with self._lock:
            self._closed = True  # a request still out (a hung port) can no longer write into the bundle
            if self._stack is not None:
                try:
                    self._stack.close()
                except OSError as exc:
                    self.errors.append(f"closing {INDEX}: {exc}")
            self._stack = None
            self._index = self._metrics = None
        rec.ended = time.monotonic()
        rec.files = list(dict.fromkeys(self.files))
        eps = [p.endpoint for p in self.plans if p.endpoint is not None]
        found = [e for e in eps if e.metrics or e.pprof]
        rec.stats = {
            "endpoints": [{"pid": e.pid, "server": e.kind, "metrics": e.metrics, "pprof": e.pprof, "source": e.source,
                           **({"network_namespace": e.netns} if e.netns else {})} for e in found],
            "not_found": {str(p.target.pid): (p.endpoint.tried if p.endpoint else []) + p.refused
                          for p in self.plans if p.endpoint is None or not (p.endpoint.metrics or p.endpoint.pprof)},
            "requests": self.requests, "ok": self.ok, "bytes": self.bytes, "failures": dict(sorted(self.failures.items())),
            "interval": self.interval,
        }
        gave_up = {str(p.target.pid): p.gave_up for p in self.plans if p.gave_up}
        if gave_up:
            rec.stats["gave_up"] = gave_up
        if not found:
            why = "; ".join(f"pid {p.target.pid}: " + ("; ".join(((p.endpoint.tried if p.endpoint else []) + p.refused)[:4])
                                                      or "no candidate")
                            for p in self.plans)
            rec.status, rec.reason = SKIPPED, f"no HTTP status port answered /metrics or /debug/pprof/ ({why})"
            return rec
        failed = sum(self.failures.values())
        if self.ok == 0:
            rec.status, rec.reason = FAILED, f"every request failed ({self._failure_text()})"
        elif self.errors:
            rec.status, rec.reason = PARTIAL, "; ".join(self.errors[:2])
        else:
            # Requests a server answered badly are its own evidence (counted, named in the index and the
            # report), not a hole in the capture: the collector covered the window.
            rec.status = OK
            if failed:
                rec.reason = f"{failed} of {self.requests} requests failed: {self._failure_text()}"
        return rec

    def _failure_text(self) -> str:
        return ", ".join(f"{n} {k}" for k, n in sorted(self.failures.items()))

    # ------------------------------------------------------------------ the worker
    def _run(self, plan: _Plan) -> None:
        pid = plan.target.pid
        ns = netns_of(pid)
        netns = ns if ns is not None and ns != netns_of("self") else None
        if netns is not None:
            why = join_netns(pid)
            if why is not None:
                plan.endpoint = Endpoint(pid, plan.kind, tried=[f"the target is in another network namespace: {why}"],
                                         netns=netns)
                return
        ep = self._discover(plan)
        ep.netns = netns
        plan.endpoint = ep
        if not (ep.metrics or ep.pprof):
            return
        t_start = time.monotonic()
        self._round(plan, "start")
        if ep.pprof and self.cpu_profile and self.duration:
            secs = int(self.duration - (time.monotonic() - t_start) - 1)
            if secs >= 1:
                th = threading.Thread(target=self._cpu, args=(plan, secs), daemon=True,
                                      name=f"profiler-status-cpu-{pid}")
                self._cpu_threads.append(th)
                th.start()
        next_metrics = t_start + self.interval
        middle = t_start + self.duration / 2 if self.duration else t_start + MIDDLE_EVERY
        while not self.stop_event.is_set():
            now = time.monotonic()
            if ep.metrics and now >= next_metrics:
                self._metrics_once(plan)
                next_metrics = max(next_metrics + self.interval, time.monotonic() + 0.1)
            if ep.pprof and now >= middle:
                self._goroutines(plan)
                middle = now + (MIDDLE_EVERY if not self.duration else 1e18)
            wait = min(next_metrics if ep.metrics else now + 1.0, middle) - time.monotonic()
            self.stop_event.wait(max(0.05, min(wait, 1.0)))
        self._round(plan, "end")

    def _round(self, plan: _Plan, when: str) -> None:
        """The start or end set: metrics, goroutines, mutex and block profiles."""
        assert plan.endpoint is not None
        if plan.endpoint.metrics:
            self._metrics_once(plan)
        if plan.endpoint.pprof:
            self._goroutines(plan)
            for kind in ("mutex", "block"):
                self._profile(plan, kind, f"/debug/pprof/{kind}", when, PROFILE_TIMEOUT)

    def _discover(self, plan: _Plan) -> Endpoint:
        ep = Endpoint(plan.target.pid, plan.kind)
        for c in plan.candidates:
            if self.stop_event.is_set():
                break
            if c.source == LISTENING:  # nobody named it: is it HTTP? listened to, sent nothing
                parts = urlsplit(c.url)
                said = speaks_first(parts.hostname or "", parts.port or 0)
                if said is not None:
                    ep.tried.append(f"{c.url} ({c.source}): speaks first ({said}): not HTTP, not asked")
                    continue
            if ep.metrics is None:
                r = fetch(f"{c.url}/metrics", timeout=self._timeout(PROBE_TIMEOUT), max_bytes=PROBE_MAX)
                self._count(r)
                if r.error is None and looks_exposition(r.body) and not looks_html(r.body, r.content_type):
                    ep.metrics, ep.source = c.url, ep.source or c.source
                elif r.error == TOO_LARGE and "text/plain" in r.content_type:
                    ep.metrics, ep.source = c.url, ep.source or c.source  # big, but Prometheus text
                else:
                    ep.tried.append(f"{c.url}/metrics ({c.source}): {r.detail or 'not Prometheus text'}")
            if ep.pprof is None:
                r = fetch(f"{c.url}/debug/pprof/", timeout=self._timeout(PROBE_TIMEOUT), max_bytes=PROBE_MAX)
                self._count(r)
                if r.error is None and b"goroutine" in r.body:
                    ep.pprof = c.url
                    ep.source = ep.source or c.source
                elif ep.metrics == c.url:
                    ep.tried.append(f"{c.url}/debug/pprof/: {r.detail or 'no pprof index'}")
            if ep.metrics and ep.pprof:
                break
        self._log({"kind": "endpoint", "pid": plan.target.pid, "server": plan.kind, "metrics": ep.metrics,
                   "pprof": ep.pprof, "source": ep.source, "tried": ep.tried[:MAX_CANDIDATES],
                   "refused": plan.refused})
        return ep

    # ------------------------------------------------------------------ requests
    def _count(self, r: Reply, plan: _Plan | None = None) -> None:
        if plan is not None:
            if r.error in (TIMEOUT, REFUSED):
                plan.misses += 1
                if plan.misses >= GIVE_UP_AFTER and not plan.gave_up:
                    plan.gave_up = f"{plan.misses} requests in a row: {r.detail}; its port was left alone after that"
            elif r.error is None:
                plan.misses = 0
        with self._lock:
            self.requests += 1
            if r.error is None:
                self.ok += 1
                self.bytes += len(r.body)
            else:
                self.failures[r.error] = self.failures.get(r.error, 0) + 1

    def _log(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            if self._index is not None and not self._closed:
                try:
                    self._index.write(line)
                except OSError as exc:
                    self.errors.append(f"{INDEX}: {exc}")

    def _entry(self, plan: _Plan, kind: str, url: str, t0: float, r: Reply, member: str | None) -> None:
        self._log({"kind": kind, "pid": plan.target.pid, "url": url, "t0": round(t0, 6),
                   "t1": round(t0 + r.seconds, 6), "status": r.status, "bytes": len(r.body),
                   "content_type": r.content_type, "member": member, "error": r.error, "detail": r.detail or None})

    def _metrics_once(self, plan: _Plan) -> None:
        assert plan.endpoint is not None and plan.endpoint.metrics
        url = f"{plan.endpoint.metrics}/metrics"
        t0 = time.monotonic()
        if plan.gave_up:
            return
        r = fetch(url, timeout=self._timeout(METRICS_TIMEOUT), max_bytes=METRICS_MAX, gzip_ok=True,
                  accept="text/plain;version=0.0.4;q=1,*/*;q=0.1")
        line = b""
        if r.error is None:
            if looks_html(r.body, r.content_type):
                r = fail_reply(r, HTML, "answered HTML, not Prometheus text", t0)
                r.seconds = time.monotonic() - t0
            elif not looks_exposition(r.body):
                r = fail_reply(r, NOT_TEXT, "not Prometheus text exposition", t0)
            else:
                rec = {"pid": plan.target.pid, "t0": round(t0, 6), "t1": round(t0 + r.seconds, 6), "url": url,
                       "body": r.body.decode("utf-8", "replace")}
                # UTF-8 as it came (no \u escapes): a record is at most about twice its body, and the
                # reader takes it whole (members.SERVER_METRICS_LINE_MAX); beyond, control characters
                line = json.dumps(rec, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
                if len(line) > members.SERVER_METRICS_LINE_MAX:
                    r = fail_reply(r, NOT_TEXT, "mostly control characters, not Prometheus text: not kept", t0)
        self._count(r, plan)
        member = None
        if r.error is None:
            with self._lock:
                if self._metrics is not None and not self._closed:
                    try:
                        self._metrics.write(line)
                        member = METRICS
                    except OSError as exc:
                        self.errors.append(f"{METRICS}: {exc}")
        self._entry(plan, "metrics", url, t0, r, member)

    def _next(self, plan: _Plan, kind: str) -> int:
        with self._lock:
            n = plan.seq.get(kind, 0) + 1
            plan.seq[kind] = n
        return n

    def _save(self, name: str, body: bytes) -> bool:
        with self._lock:
            if self._closed:
                return False
        try:
            with self.writer.open_member(name, compress=False) as fh:
                fh.write(body)
        except OSError as exc:
            with self._lock:
                self.errors.append(f"{name}: {exc}")
            return False
        with self._lock:
            self.files.append(name)
        return True

    def _goroutines(self, plan: _Plan) -> None:
        assert plan.endpoint is not None and plan.endpoint.pprof
        if plan.gave_up:
            return
        n = self._next(plan, "goroutine")
        url = f"{plan.endpoint.pprof}/debug/pprof/goroutine"
        t0 = time.monotonic()
        r = fetch(url, timeout=self._timeout(PROFILE_TIMEOUT), max_bytes=PROFILE_MAX)
        member = None
        if r.error is None and looks_pprof(r.body) and not looks_html(r.body, r.content_type):
            member = members.server_profile(plan.target.pid, "goroutine", str(n), r.body[:2] == b"\x1f\x8b")
        else:
            if r.error is None:
                r = fail_reply(r, HTML if looks_html(r.body, r.content_type) else NOT_PPROF,
                          "the goroutine profile is not pprof: asking for the text dump (debug=2)", t0)
            self._count(r, plan)
            self._entry(plan, "goroutine", url, t0, r, None)
            if plan.gave_up:
                return
            url = f"{plan.endpoint.pprof}/debug/pprof/goroutine?debug=2"
            t0 = time.monotonic()
            r = fetch(url, timeout=self._timeout(PROFILE_TIMEOUT), max_bytes=PROFILE_MAX)
            if r.error is None and (looks_html(r.body, r.content_type) or not r.body.startswith(b"goroutine ")):
                r = fail_reply(r, HTML if looks_html(r.body, r.content_type) else NOT_TEXT,
                          "the goroutine dump is not Go's text format", t0)
            if r.error is None:
                member = members.server_goroutine_text(plan.target.pid, str(n))
        if member is not None and not self._save(member, r.body):
            member = None
        self._count(r, plan)
        self._entry(plan, "goroutine", url, t0, r, member)

    def _profile(self, plan: _Plan, kind: str, path: str, tag: str, timeout: float) -> None:
        assert plan.endpoint is not None and plan.endpoint.pprof
        if plan.gave_up:
            return
        url = f"{plan.endpoint.pprof}{path}"
        t0 = time.monotonic()
        r = fetch(url, timeout=timeout if kind == "cpu" else self._timeout(timeout), max_bytes=PROFILE_MAX)
        member = None
        if r.error is None:
            if looks_html(r.body, r.content_type):
                r = fail_reply(r, HTML, "answered HTML, not a pprof profile", t0)
            elif not looks_pprof(r.body):
                r = fail_reply(r, NOT_PPROF, "not a pprof profile", t0)
            else:
                member = members.server_profile(plan.target.pid, kind, tag, r.body[:2] == b"\x1f\x8b")
                if not self._save(member, r.body):
                    member = None
        self._count(r, plan)
        self._entry(plan, kind, url, t0, r, member)

    def _cpu(self, plan: _Plan, seconds: int) -> None:
        self._profile(plan, "cpu", f"/debug/pprof/profile?seconds={seconds}", "window", seconds + PROFILE_TIMEOUT)

