"""The run side: what the checks use to launch, read and judge a benchmark, without ReFrame.

Transport mapping and verification, collectives, bus bandwidth, GPUs, fabric counters,
benchmark providers, site configuration, process accounting, bounded stress traffic,
references, and the parsers of every tool's output (``parsers/``).
"""
