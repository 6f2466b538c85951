"""One agent's turn outside the run loop: resolving an agent, invoking it, its sessions,
live output, network and cost; and crew checks and setup commands, run the same way."""
