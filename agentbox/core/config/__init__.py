"""What the person wrote and what agentbox keeps for them: crew.yaml, profile.yaml and
config.yaml as models, profiles, secrets, the project's `.agent-box/`, zones, tokens."""
