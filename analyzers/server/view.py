"""The server-status members of a bundle, read once (analyzers layer).

``read_server_status(bundle)`` reads ``server-status.jsonl`` (every request), the /metrics
scrapes in ``server-metrics.jsonl.gz`` and each Go profile file the collector kept, and
returns per target: the scrapes and the Grafana metrics computed from them, the goroutine
snapshots (start, middle, end), the window's mutex and block contention, the server's own CPU
profile; and, for the whole capture, what went wrong, counted and named: requests that
failed by kind (timeout, HTML, too large, closed mid-body...), /metrics lines and profiles
that could not be parsed. Nothing read here raises: one bad record (a scrape, an index line, a
profile) skips only itself, counted in its own member's read log (which names the member) or as
a bad profile naming the file; times must be finite CLOCK_MONOTONIC seconds (0..1e10).
"""

from __future__ import annotations

import io
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from profiler.analyzers.server import goroutines as G
from profiler.analyzers.server import keyseries, profiles
from profiler.analyzers.server.prometheus import Seen, parse_lines
from profiler.analyzers.server.series import Scrape

from profiler.bundle import Bundle, members
from profiler.errors import InputError
from profiler.inputs.pprof import Profile, parse_profile
from profiler.knowledge.servers import server_of

PROFILE_MAX = 64 << 20  # bytes of one profile, decompressed
COLLECTOR = "server-status"
MAX_TIME = 1e10  # CLOCK_MONOTONIC seconds: a time beyond is no capture's
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str, limit: int = 200) -> str:
    """A server's text made safe to show on one line: control characters escaped, cut short."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text.replace("\n", " "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class TargetStatus:
    pid: int
    server: str | None = None  # tidb | tikv | pd | etcd (from the families it exports), else None
    metrics_url: str | None = None
    pprof_url: str | None = None
    source: str = ""
    scrapes: list[Scrape] = field(default_factory=list)
    keys: list[keyseries.KeyValue] = field(default_factory=list)
    goroutines: list[G.GoroutineSnapshot] = field(default_factory=list)  # time order
    mutex: profiles.ContentionProfile | None = None
    block: profiles.ContentionProfile | None = None
    cpu: profiles.CpuTop | None = None
    bad_lines: int = 0  # /metrics lines that did not parse, over every scrape
    bad_examples: list[str] = field(default_factory=list)

    def key(self, key: str) -> keyseries.KeyValue | None:
        return next((k for k in self.keys if k.info.key == key), None)

    @property
    def go(self) -> bool:
        return bool(self.goroutines) or any(k.info.server == "go" for k in self.keys)


@dataclass
class ServerStatusView:
    status: str  # the collector's status (ok, partial, failed, skipped, missing)
    reason: str | None = None
    targets: dict[int, TargetStatus] = field(default_factory=dict)
    requests: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # kind -> requests
    failure_examples: dict[str, str] = field(default_factory=dict)  # kind -> the first one, named
    warnings: list[str] = field(default_factory=list)


BAD_PROFILE = "bad-profile"  # a kept profile that does not decompress or parse (counted with the failures)


def _bad_profile(v: ServerStatusView, name: str, why: str) -> None:
    v.failures[BAD_PROFILE] = v.failures.get(BAD_PROFILE, 0) + 1
    v.failure_examples.setdefault(BAD_PROFILE, printable(why if why.startswith(name) else f"{name}: {why}"))


def _read_profile(bundle: Bundle, name: str, v: ServerStatusView) -> Profile | None:
    try:
        with bundle.open_binary(name, text=False) as fh:  # binary: no line ends folded, no line limit
            data = fh.read(PROFILE_MAX + 1)
    except (OSError, EOFError, zlib.error) as exc:
        _bad_profile(v, name, f"cannot be read ({exc})")
        return None
    except Exception as exc:  # noqa: BLE001 - gzip.BadGzipFile and friends: a corrupt member
        _bad_profile(v, name, f"not a readable profile ({type(exc).__name__}: {exc})")
        return None
    if len(data) > PROFILE_MAX:
        _bad_profile(v, name, f"larger than {PROFILE_MAX >> 20} MiB decompressed")
        return None
    try:
        return parse_profile(data, name)
    except InputError as exc:
        _bad_profile(v, name, str(exc))
        return None


def _target(v: ServerStatusView, pid: Any) -> TargetStatus | None:
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < (1 << 31):
        return None  # no process has that id: a damaged record
    return v.targets.setdefault(pid, TargetStatus(pid))


def _when(r: dict[str, Any]) -> float | None:
    """The middle of a request's (t0, t1), or None when they are no CLOCK_MONOTONIC times (NaN,
    infinite, negative, beyond 1e10, not numbers, or t1 before t0)."""
    t0, t1 = r.get("t0"), r.get("t1")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (t0, t1)):
        return None
    a, b = float(t0), float(t1)  # type: ignore[arg-type]
    if not (math.isfinite(a) and math.isfinite(b) and 0 <= a <= b <= MAX_TIME):
        return None
    return (a + b) / 2


def read_server_status(bundle: Bundle) -> ServerStatusView | None:
    """The server-status view, or None when the bundle has no server-status record at all."""
    rec = bundle.manifest.collector(COLLECTOR)
    if rec is None and not bundle.has(members.SERVER_STATUS):
        return None
    v = ServerStatusView(status=rec.status if rec is not None else "missing", reason=rec.reason if rec else None)
    if not bundle.has(members.SERVER_STATUS):
        return v
    profiles_seen: list[dict[str, Any]] = []
    for line in bundle.iter_lines(members.SERVER_STATUS):
        try:
            r = json.loads(line)
        except ValueError:
            v.warnings.append(f"{members.SERVER_STATUS}: a line that is not JSON: skipped")
            continue
        if not isinstance(r, dict):
            continue
        kind = r.get("kind")
        t = _target(v, r.get("pid"))
        if t is None:
            continue
        if kind == "endpoint":
            t.metrics_url, t.pprof_url = r.get("metrics"), r.get("pprof")
            t.source = str(r.get("source") or "")
            t.server = r.get("server") if isinstance(r.get("server"), str) else None
            continue
        v.requests += 1
        err = r.get("error")
        if isinstance(err, str) and err:
            v.failures[err] = v.failures.get(err, 0) + 1
            v.failure_examples.setdefault(err, f"{printable(str(r.get('url')))}: {printable(str(r.get('detail') or err))}")
        elif kind in ("goroutine", "mutex", "block", "cpu") and isinstance(r.get("member"), str):
            profiles_seen.append(r)
    # /metrics scrapes: one record a line; each one that cannot be read is skipped and counted
    if bundle.has(members.SERVER_METRICS):
        log = bundle.log(members.SERVER_METRICS)
        seen: Seen = {}  # the series' heads, read once for all the scrapes
        for line in bundle.iter_lines(members.SERVER_METRICS, line_limit=members.SERVER_METRICS_LINE_MAX):
            if line:
                _scrape(v, line, log, seen)
    # Go profiles
    starts: dict[tuple[int, str], tuple[float, Profile | None]] = {}
    for r in profiles_seen:
        try:
            _profile_record(bundle, v, r, starts)
        except Exception as exc:  # noqa: BLE001 - one profile that breaks a reader skips itself, named
            _bad_profile(v, str(r.get("member")), f"cannot be read ({type(exc).__name__}: {exc})")
    for t in v.targets.values():
        _conclude(v, t)
    requests = {k: n for k, n in v.failures.items() if k != BAD_PROFILE}
    if requests:
        named = "; ".join(f"{n} {k} (e.g. {v.failure_examples[k]})" for k, n in sorted(requests.items()))
        v.warnings.insert(0, f"server-status: {sum(requests.values())} of {v.requests} requests failed: {named}")
    if v.failures.get(BAD_PROFILE):
        v.warnings.append(f"server-status: {v.failures[BAD_PROFILE]} profile(s) the server sent could not be read and "
                          f"were left out (e.g. {v.failure_examples[BAD_PROFILE]})")
    return v


def _scrape(v: ServerStatusView, line: str, log: Any, seen: Seen) -> None:
    """One /metrics record; a record that cannot be read is counted in the member's read log by why."""
    try:
        r = json.loads(line)
    except (ValueError, RecursionError):
        log.skip(1, "records that are not JSON")
        return
    if not isinstance(r, dict) or not isinstance(r.get("body"), str):
        log.skip(1, "records without a body")
        return
    t = _target(v, r.get("pid"))
    when = _when(r)
    if t is None:
        log.skip(1, "records whose pid no process has")
        return
    if when is None:
        log.skip(1, "records whose times are no CLOCK_MONOTONIC seconds (NaN, infinite, out of range)")
        return
    try:
        snap = parse_lines(io.StringIO(r.pop("body")), seen)  # lines one at a time, not a list of millions
    except Exception:  # noqa: BLE001 - a body that breaks the parser skips only its scrape
        log.skip(1, "records whose body could not be parsed")
        return
    t.bad_lines += snap.errors
    for ex in snap.examples:
        if len(t.bad_examples) < 3:
            t.bad_examples.append(printable(ex))
    if snap.dropped:
        v.warnings.append(f"/metrics of pid {t.pid}: {snap.dropped} series past the cap of "
                          f"{len(snap.samples)} left out")
    t.scrapes.append(Scrape(when, snap))


def _profile_record(bundle: Bundle, v: ServerStatusView, r: dict[str, Any],
                    starts: dict[tuple[int, str], tuple[float, Profile | None]]) -> None:
    """One profile the index names: read, parsed and put with its target."""
    t = _target(v, r.get("pid"))
    assert t is not None
    name, kind = r["member"], r["kind"]
    try:
        members_ok = bundle.has(name)
    except Exception:  # noqa: BLE001 - a name that leaves the bundle
        v.warnings.append(f"{members.SERVER_STATUS} names an unsafe file {printable(str(name))!r}: skipped")
        return
    if not members_ok:
        v.warnings.append(f"{printable(name)}: listed but missing from the bundle")
        return
    when = _when(r)
    if when is None:  # a damaged record: that profile only is left out
        v.warnings.append(f"{members.SERVER_STATUS}: {printable(str(name))}: times that are not numbers of "
                          "CLOCK_MONOTONIC seconds (NaN, infinite, out of range): skipped")
        return
    if kind == "goroutine" and name.endswith(".txt"):
        try:
            snap = G.from_text(bundle.iter_lines(name), when)
        except Exception as exc:  # noqa: BLE001 - a dump we cannot read is a warning
            _bad_profile(v, name, f"cannot be read ({type(exc).__name__})")
            return
        if snap.total:
            t.goroutines.append(snap)
        else:  # a Go server always has goroutines: a dump with none is one we could not read
            _bad_profile(v, name, "no goroutine in the text dump")
        return
    prof = _read_profile(bundle, name, v)
    if kind == "goroutine":
        if prof is not None:
            t.goroutines.append(G.from_profile(prof, when))
    elif kind in ("mutex", "block"):
        if name.endswith(("-start.pb.gz", "-start.pb")):
            starts[(t.pid, kind)] = (when, prof)
        elif prof is not None:
            t0, first = starts.get((t.pid, kind), (None, None))
            secs = when - t0 if t0 is not None else 0.0
            cp = profiles.contention(kind, first, prof, secs)
            if kind == "mutex":
                t.mutex = cp
            else:
                t.block = cp
    elif kind == "cpu" and prof is not None:
        t.cpu = profiles.cpu_top(prof)


def _conclude(v: ServerStatusView, t: TargetStatus) -> None:
    """A target's scrapes and snapshots in time order, its server told from the families it
    exports, its key series; a series computation that breaks loses the key series of that
    target only (named), never its scrapes, profiles or the other targets."""
    t.scrapes.sort(key=lambda s: s.t)
    t.goroutines.sort(key=lambda g: g.t)
    names = set().union(*(s.snap.names() for s in t.scrapes)) if t.scrapes else set()
    t.server = server_of(names) or t.server
    try:
        t.keys = keyseries.key_values(t.server, t.scrapes)
    except Exception as exc:  # noqa: BLE001 - the scrapes stay; only the computed series are lost
        v.warnings.append(f"{members.SERVER_METRICS}: the key series of pid {t.pid} could not be computed "
                          f"({type(exc).__name__}: {printable(str(exc))})")
    if t.bad_lines:
        v.warnings.append(f"/metrics of pid {t.pid}: {t.bad_lines} lines could not be read and were skipped"
                          + (f" ({'; '.join(t.bad_examples)})" if t.bad_examples else ""))
