"""Reliability analytics over Slurm accounting: failure rates, MTTF, ETTR, reports.

The `[analytics]` extra (polars, numpy, matplotlib) is needed by ingest, metrics, synth,
simulate and report; `model` and `stats` are pure Python so `slurm-triage mttf` and
`slurm-triage ettr` answer without importing any of it. Nothing on a compute node (prolog,
epilog, wrapper) imports this package.

Units: r_f is failures per node-day (the paper's 6.50 per 1000 node-days is 6.5e-3).
"""
