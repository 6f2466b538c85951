"""The headless core of agentbox: never imports textual or agentbox.tui."""
