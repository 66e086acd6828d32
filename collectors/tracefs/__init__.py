"""Collectors that read tracefs directly (collectors layer): block IO from a private tracefs instance."""
