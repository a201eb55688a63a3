"""Egress: the proxy, grants and their holds, host-side enforcement, the pages and warm sandboxes."""
