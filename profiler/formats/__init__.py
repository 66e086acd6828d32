"""Codecs of the files perf, the kernel and our collectors write (formats layer)."""
