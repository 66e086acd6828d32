"""Block IO (analyzers layer): issue/complete pairing, IO statistics, latency heatmaps, the bcc backend's histograms."""
