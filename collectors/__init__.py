"""Collectors (collectors layer): one module per source of evidence, each behind the Collector protocol."""
