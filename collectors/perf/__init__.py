"""perf record and perf stat collectors (collectors layer): the perf-backed base, where events live, duty cycles."""
