"""Collectors (collectors layer): one module per source of evidence, each behind the Collector protocol.

Grouped by what they read: ``perf/`` (perf record and perf stat, with where their events live and
their duty cycle), ``tracefs/`` (block IO from a private tracefs instance), ``procfs/`` (the
in-process /proc and cgroup sampler), ``server/`` (each target's HTTP status port), ``runtime/``
(what built a target, Go frame names), ``bcc/`` (the eBPF backend). What they share sits here:
the protocol (``base.py``), the default list (``registry.py``), host facts (``host.py``), child
processes (``process.py``) and small file reads (``files.py``).
"""
