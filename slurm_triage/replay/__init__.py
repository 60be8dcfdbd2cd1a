"""Replay of a site's history through other policy settings, and what replay and the twin
share: the Judge (the real policy chain and actuator fed from an in-memory journal) and
the SimDoor (the Slurm door onto a simulated Slurm). docs/twin.md.
"""
