"""agentbox: a workbench for project-level teams of CLI coding agents."""

__version__ = "0.1.0"
