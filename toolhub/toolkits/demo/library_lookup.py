"""
title: Library Lookup
author: ToolHub examples
description: Looks a word up in a small built-in glossary, reporting progress and citing its source.
version: 1.2.0
license: MIT
"""

import asyncio
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

GLOSSARY = {
    "valve": "A setting of a toolkit, edited by an admin (Valves) or by each user (UserValves).",
    "toolkit": "One Python file whose Tools class holds the tools an LLM may call.",
    "citation": "A reference to the document a tool's answer came from.",
}


class Tools:
    class Valves(BaseModel):
        max_results: int = Field(3, ge=1, le=10, description="How many entries to return at most")

    class UserValves(BaseModel):
        style: Literal["short", "long"] = Field("short", description="How much of each entry to show")

    def __init__(self):
        self.valves = self.Valves()
        self.citation = False

    async def lookup(
        self,
        word: str,
        exact: bool = True,
        language: str | None = None,
        __user__: dict = {},
        __event_emitter__=None,
    ) -> str:
        """
        Look a word up in the glossary.
        :param word: The word to look up
        :param exact: Only return exact matches
        :param language: Optional language code of the word
        """
        if __event_emitter__:
            await __event_emitter__(
                {"type": "status", "data": {"description": f"Looking up {word!r}", "done": False}}
            )
        await asyncio.sleep(0.01)
        hits = [k for k in GLOSSARY if (k == word.lower() if exact else word.lower() in k)]
        hits = hits[: self.valves.max_results]
        style = __user__.get("valves").style if __user__.get("valves") else "short"
        for hit in hits:
            if __event_emitter__:
                await __event_emitter__(
                    {
                        "type": "citation",
                        "data": {
                            "document": [GLOSSARY[hit]],
                            "metadata": [{"date_accessed": datetime.now().isoformat(), "source": hit}],
                            "source": {"name": f"Glossary: {hit}", "url": f"https://example.org/glossary#{hit}"},
                        },
                    }
                )
        if __event_emitter__:
            await __event_emitter__(
                {"type": "status", "data": {"description": f"{len(hits)} found", "done": True, "hidden": False}}
            )
        if not hits:
            return f"No entry for {word!r}."
        return "\n".join(
            f"{h}: {GLOSSARY[h] if style == 'long' else GLOSSARY[h].split(',')[0]}" for h in hits
        )

    def count_words(self, text: str, unique: bool = False) -> int:
        """
        Count the words in a text.
        :param text: The text to count
        :param unique: Count each distinct word once
        """
        words = text.split()
        return len(set(words)) if unique else len(words)
