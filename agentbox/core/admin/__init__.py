"""The person's own commands around runs: doctor, demo, discard, a task's shell, a profile's
test turn, the JSON Schemas of agentbox's files."""
