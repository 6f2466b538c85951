"""The sandbox: bubblewrap's argv, the seccomp filter, write scopes, protected paths, the
egress allowlist, proxy and its listeners in the sandbox's netns, the tool's home. Imports the ground floor and the
runtimes' bind type only, so it is easy to audit."""
