from slurm_triage.cli.main import main

raise SystemExit(main())
