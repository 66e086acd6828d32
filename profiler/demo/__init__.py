"""The bundled demo workload (see workload.py), started by `profiler demo`."""
