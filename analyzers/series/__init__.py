"""Time series (analyzers layer): /proc samples, perf stat intervals, the report's timeline."""
