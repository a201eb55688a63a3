"""Everything that starts and polices sandboxes on the host: the bubblewrap launcher, its
cgroups, and the egress proxy with its rules. Never imports Django (settings come in as
arguments) and never imports uploaded code; ``toolhub/runtime/`` is what runs inside."""
