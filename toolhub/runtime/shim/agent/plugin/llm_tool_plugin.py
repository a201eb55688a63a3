"""The base class and metadata types that RAGFlow `llm_tools` plugins import.

RAGFlow registers plugins through pluginlib; inside the sandbox the runtime finds the
subclass itself, so the base class here is plain. The shapes follow RAGFlow's.
"""

from typing import TypedDict


class LLMToolParameter(TypedDict):
    type: str
    description: str
    displayDescription: str
    required: bool


class LLMToolMetadata(TypedDict):
    name: str
    displayName: str
    description: str
    displayDescription: str
    parameters: dict[str, LLMToolParameter]


class LLMToolPlugin:
    """Subclasses set `_version_` and implement `get_metadata()` and `invoke()`."""

    _version_: str

    @classmethod
    def get_metadata(cls) -> LLMToolMetadata:
        raise NotImplementedError(f"{cls.__name__} must implement get_metadata()")

    def invoke(self, **kwargs: object) -> str:
        raise NotImplementedError(f"{type(self).__name__} must implement invoke()")
