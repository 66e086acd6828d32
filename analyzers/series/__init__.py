"""Time series (analysis layer): /proc samples, perf stat intervals, the report's timeline."""
