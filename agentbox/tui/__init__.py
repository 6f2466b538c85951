"""The Textual face of agentbox: the dashboard and its screens (imported only by `agentbox tui`)."""
