"""An emulated multi-node Slurm cluster on one machine (network namespaces as nodes).

Stands alone: it manages the machine and imports nothing from the checks or testlib.
See docs/cluster.md.
"""
