"""Local Unix-socket plumbing shared by the resident daemons (the node agent, the
controller's decider) and their clients: bounded lines, the peer's uid from the kernel, a
socket bound safely.

Kept empty on purpose: the Prolog's and EpilogSlurmctld's clients import `wire` on every
job start and end, and importing a package runs its __init__ first.
"""
