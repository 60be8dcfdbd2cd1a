"""The resident node agent (docs/agent.md): a root daemon that keeps the config, logging and
NVML open and runs the Prolog's screen when the Prolog asks over a Unix socket.

Kept empty on purpose: the Prolog imports `agent.client` on every job start, and importing
a package runs its __init__ first.
"""
