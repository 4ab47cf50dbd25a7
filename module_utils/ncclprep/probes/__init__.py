"""What a node runs to measure: the probe job (job.py). The network probe, the collectives and
their blame join this package as the house gets its rooms (issue 42, docs/layout.md)."""
