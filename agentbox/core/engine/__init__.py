"""The run engine: runs on disk, scheduler, modes, failure routing, budgets, checkpoints."""
