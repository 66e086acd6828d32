"""The bcc backend (collectors layer): in-kernel aggregation with tracepoint programs from bpf/."""
