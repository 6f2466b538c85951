"""`python -m agentbox` runs the CLI."""

from agentbox.cli import main

raise SystemExit(main())
