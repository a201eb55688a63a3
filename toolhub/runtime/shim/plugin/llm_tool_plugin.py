"""RAGFlow's older path of the plugin base class: the very classes of
`agent.plugin.llm_tool_plugin`, so a plugin written against either path is found and run the
same way (the loader looks for subclasses of that one `LLMToolPlugin`)."""

from agent.plugin.llm_tool_plugin import LLMToolMetadata, LLMToolParameter, LLMToolPlugin

__all__ = ["LLMToolMetadata", "LLMToolParameter", "LLMToolPlugin"]
