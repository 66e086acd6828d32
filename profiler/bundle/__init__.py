"""The capture bundle, the contract between collectors and analyzers (bundle layer).

A bundle is a directory holding ``manifest.json`` and the raw files the collectors wrote
(docs/bundle.md). Collectors write through :class:`BundleWriter` (writer.py); analyzers and
verbs read through :class:`Bundle` (reader.py); the manifest model, its validation and its
migrations are in manifest.py; every member's file name is a constant in members.py.
"""

from __future__ import annotations

from profiler.bundle import members
from profiler.bundle.early import EarlyReads
from profiler.bundle.manifest import (
    FAILED,
    OK,
    PARTIAL,
    PENDING,
    RUNNING,
    SCHEMA,
    SKIPPED,
    STATUSES,
    VERSION,
    ClockInfo,
    CollectorRecord,
    ContainerInfo,
    HostInfo,
    LoadInfo,
    Manifest,
    RuntimeInfo,
    TargetInfo,
    ThreadInfo,
    check_member_name,
    parse_manifest,
)
from profiler.bundle.members import MANIFEST
from profiler.bundle.reader import Bundle, looks_like_bundle
from profiler.bundle.writer import BundleWriter, atomic_write_bytes

__all__ = [
    "FAILED", "MANIFEST", "OK", "PARTIAL", "PENDING", "RUNNING", "SCHEMA", "SKIPPED", "STATUSES", "VERSION",
    "Bundle", "BundleWriter", "ClockInfo", "EarlyReads", "CollectorRecord", "ContainerInfo", "HostInfo", "LoadInfo", "Manifest", "RuntimeInfo", "TargetInfo",
    "ThreadInfo", "atomic_write_bytes", "check_member_name", "looks_like_bundle", "members", "parse_manifest",
]
