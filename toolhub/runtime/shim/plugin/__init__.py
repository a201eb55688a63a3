"""Stand-in for the `plugin` package of RAGFlow before plugins moved under `agent`: older
plugin files and forks import `plugin.llm_tool_plugin`, which is the same module here."""
