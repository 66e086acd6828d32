"""Cluster capture (cluster layer, level 5 beside usecases): every node of a TiDB cluster captured over SSH in one window.

topology (TiUP file or --host flags) -> ssh (OpenSSH, one master connection per host) ->
agent (the remote side, shipped as a zipapp) -> clock offsets -> pull-back (checked like
untrusted input) -> the cluster bundle (profiler/bundle/cluster.py). It may import the
capture path, collectors, the bundle and the core; the analysis of a cluster bundle is a use
case (profiler/usecases/cluster.py). Nothing is imported here: the agent runs from this
package on nodes that have only python3.
"""
