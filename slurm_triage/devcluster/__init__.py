"""A real local Slurm cluster (one host, three nodes) for tests and demos."""
