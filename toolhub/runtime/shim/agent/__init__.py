"""Stand-in for RAGFlow's `agent` package: only what plugin files import from it."""
