"""slurm-triage: the reliability layer for Slurm GPU clusters.

Kept import-light on purpose: the prolog, epilog and wrapper import this package on every
job start, so nothing here pulls in more than the standard library.
"""

__version__ = "0.1.0"
