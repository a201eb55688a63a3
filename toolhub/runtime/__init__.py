"""ToolHub's sandbox runtime: loads one toolkit file and introspects it or calls a tool.

This package runs inside the sandbox, as hostile ground. It imports only the standard
library and pydantic, never Django, and only relative imports inside itself, because it
is copied or bound into the sandbox as a standalone directory and started through
main.py. The protocol is described in runner.py.
"""
