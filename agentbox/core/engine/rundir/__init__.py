"""A run's directory on disk, one file a job: run.json and its journal, the decision log, the
inbox, the artifact manifest, the engine lock, the disk reserve, and which runs there are.
`agentbox.core.engine.run_store.RunStore` puts them together for the rest of agentbox."""
