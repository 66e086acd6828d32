"""The bundled demo workload (demo layer; see workload.py), started by `profiler demo`."""
