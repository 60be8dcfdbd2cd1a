"""The cluster twin: a discrete-event simulation of a GPU cluster over weeks whose
decisions come from the project's own policy and actuator code, through a simulated Slurm
door (`replay.door.SimDoor`), never a re-implementation of them.

`run.compare(Scenario(...), policysets.parse("none,native,triage", []))` runs one scenario
under each policy set; `validate` checks the twin against the model (analytics.model,
analytics.simulate). Needs the `[analytics]` extra (numpy). docs/twin.md.
"""
