"""The dashboard's panels: header, checkpoints, members, queue, artifacts, events."""
