"""What servers say about themselves (analyzers layer): Prometheus /metrics, Go goroutine, mutex, block and CPU profiles.

``prometheus`` reads the exposition text, ``series`` turns scrapes into rates and histogram
quantiles, ``goroutines`` groups a Go server's goroutines by what they wait for, ``profiles``
the mutex/block/CPU profiles, and ``view`` reads the server-status collector's members once.
"""
