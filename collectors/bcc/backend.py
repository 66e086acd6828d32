"""`--backend perf|bcc|auto` (collectors layer): which collectors gather block IO, syscalls and off-CPU evidence.

The bcc collectors replace the perf collectors of the same name (block-io, syscalls,
offcpu-stacks) and add futex-waits, which only bcc can gather without kprobes. ``auto``
takes bcc where :func:`profiler.collectors.bcc.common.bcc_status` says it works, else
perf; the choice and its reason are recorded in each bcc collector's stats and, through
``registry.backend_choice``, in the manifest's options (``backend_used``, ``backend_reason``).
attach and run default to perf: auto and bcc are asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from profiler.collectors import host
from profiler.collectors.bcc.common import bcc_status

from profiler.errors import CapabilityError, UsageError

BACKENDS = ("perf", "bcc", "auto")


def bcc_collectors() -> list[Any]:
    from profiler.collectors.bcc.blockio import BccBlockIO
    from profiler.collectors.bcc.futex import BccFutex
    from profiler.collectors.bcc.offcpu import BccOffCpu
    from profiler.collectors.bcc.syscalls import BccSyscalls

    return [BccBlockIO(), BccSyscalls(), BccOffCpu(), BccFutex()]


def choose(requested: str) -> tuple[str, str]:
    """(backend to use, why). ``bcc`` on a host that cannot run it is an error, with the fix."""
    if requested not in BACKENDS:
        raise UsageError(f"--backend {requested!r}: use one of {', '.join(BACKENDS)}")
    if requested == "perf":
        return "perf", "asked for --backend perf"
    if host.nested_pid_namespace():
        why = "the profiler runs in a nested PID namespace, where BPF programs see the host's thread ids"
        if requested == "bcc":
            raise CapabilityError(f"--backend bcc: {why}; use --backend perf (or auto) here")
        return "perf", f"auto: perf, {why}"
    ok, reason, fix = bcc_status()
    if requested == "bcc":
        if not ok:
            raise CapabilityError(f"--backend bcc: {reason}" + (f"; fix: {fix}" if fix else ""))
        return "bcc", "asked for --backend bcc"
    if ok:
        return "bcc", f"auto: {reason}"
    return "perf", f"auto: bcc unavailable ({reason})"


def with_backend(collectors: Sequence[Any], requested: str) -> tuple[list[Any], str, str]:
    """The capture's collectors for ``--backend``: (collectors, backend used, reason).

    With bcc, each perf collector that has a bcc counterpart of the same name is replaced in
    place (start order kept) and futex-waits is added after them.
    """
    backend, reason = choose(requested)
    if backend != "bcc":
        return list(collectors), backend, reason
    bcc = {c.name: c for c in bcc_collectors()}
    for c in bcc.values():
        c.backend_reason = reason
    out = [bcc.pop(c.name, c) for c in collectors]
    out.extend(bcc.values())
    return out, backend, reason
