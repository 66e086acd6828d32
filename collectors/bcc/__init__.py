"""The bcc backend (capture layer): in-kernel aggregation with tracepoint programs from bpf/."""
