"""Codecs of the files perf, the kernel and our collectors write (formats layer): read and written here, below both sides.

perf.data (``perfdata.py``, and its smaller copies: ``perfdata_reduce.py``), the block events
member ``block.events.bin`` (``blockevents.py``) with the tracefs ring-buffer pages it is decoded
from (``tracefs_pages.py``), ELF files (``elf.py``) and what a Go executable says about itself
(``golang.py``); the members the perf collectors make of perf's events, sched_switch paired into
off-CPU intervals (``offcpu_intervals.py``) and raw_syscalls into per-interval counts
(``syscall_pairs.py``). The collectors write these files during a capture, the inputs layer reads
them when a user hands one to a verb, and the two may not import each other: a codec lives
here, imports only the core, and knows nothing of bundles, collectors or analyses.
"""
