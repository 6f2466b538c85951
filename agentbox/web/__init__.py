"""The browser face: the dashboard served to a browser (`agentbox serve`)."""
