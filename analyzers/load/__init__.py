"""Load generators' output next to a capture (analyzers layer): sysbench, go-ycsb and go-tpc parsed,
put on the capture's clock, its warm-up, dips, per-transaction costs, and thread sweeps' knees (docs/load.md)."""
