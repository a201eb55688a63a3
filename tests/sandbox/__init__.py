"""The sandbox: isolation of a cold run, its seccomp filter, the uid pool and warm sandboxes."""
