"""The `slurm-triage` command: one parser, one module per subcommand, imported lazily."""
