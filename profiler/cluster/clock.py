"""Clock offsets over SSH round trips (cluster layer): NTP's estimate from the best of a few pings.

The controller writes a ping on the agent's channel at ``t0`` (its wall clock), the agent
answers with its wall clock ``tr``, the answer arrives at ``t1``. If the two legs took the
same time, the node's clock is ahead by ``tr - (t0 + t1) / 2``; whatever the legs took, the
error is at most ``(t1 - t0) / 2``. The sample with the shortest round trip bounds it best,
so that one is kept, with half its round trip as the uncertainty.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    sent: float  # controller wall clock when the ping left
    remote: float  # node wall clock in the answer
    received: float  # controller wall clock when the answer came


@dataclass(frozen=True)
class Offset:
    offset: float  # node clock minus controller clock (s)
    uncertainty: float  # |error| bound (s): half the best round trip
    rtt: float
    samples: int


def estimate(samples: list[Sample]) -> Offset | None:
    good = [s for s in samples if s.received >= s.sent]
    if not good:
        return None
    best = min(good, key=lambda s: s.received - s.sent)
    rtt = best.received - best.sent
    return Offset(offset=best.remote - (best.sent + best.received) / 2, uncertainty=rtt / 2, rtt=rtt,
                  samples=len(good))
