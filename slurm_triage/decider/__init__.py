"""The resident decider (docs/decider.md): a daemon on the slurmctld host, run as SlurmUser,
that keeps the config, logging and the decision code loaded and decides a job end when
EpilogSlurmctld asks over a Unix socket.

Kept empty on purpose: EpilogSlurmctld imports `decider.client` at every job end, and
importing a package runs its __init__ first.
"""
