"""The signals that end a capture (capture layer): Ctrl-C, SIGTERM and SIGHUP, one meaning.

A terminal's Ctrl-C (SIGINT), ``timeout``, systemd, CI runners and ``kubectl delete`` (SIGTERM)
and a closed terminal or SSH session (SIGHUP) all mean "stop now and keep what was captured".
While a capture runs (:class:`profiler.capture.session.Session`, the cluster engine) each of them
only sets a flag its loop reads, so the stop path runs whole: every collector stopped and its
files finished, the tracefs instance removed, the bundle marked ``partial`` with the signal named.
Outside a capture the CLI turns them into :class:`~profiler.errors.Interrupted` (exit 128 + the
signal's number: 130, 143, 129).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["STOP_SIGNALS", "describe", "catch"]

STOP_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def describe(signum: int) -> str:
    """How a stop by this signal is told in a manifest: 'Ctrl-C', 'SIGTERM', 'SIGHUP'."""
    if signum == signal.SIGINT:
        return "Ctrl-C"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@contextlib.contextmanager
def catch(on_signal: Callable[[int], None]) -> Iterator[None]:
    """Within the block, each stop signal calls ``on_signal(signum)`` instead of its handler; the
    previous handlers come back at the end. Only the main thread can take signals: elsewhere (a
    library caller's thread) nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        on_signal(signum)

    old: dict[int, Any] = {}
    try:
        for sig in STOP_SIGNALS:
            old[sig] = signal.signal(sig, handler)
        yield
    finally:
        for sig, prev in old.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
