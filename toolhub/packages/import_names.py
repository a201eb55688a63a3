"""Which distribution provides an imported module: the maintained table of names that differ
(`import bs4` comes from `beautifulsoup4`) and the modules that need no package at all.
No Django: the static checks of an upload use it.

The table covers the names Open WebUI toolkits use most and the classic mismatches; any name
not in it is taken as its own distribution name (`import requests` → `requests`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from packaging.utils import canonicalize_name

# Import name → distribution name, for the names that differ.
DISTRIBUTIONS: dict[str, str] = {
    "bs4": "beautifulsoup4",
    "yaml": "PyYAML",
    "PIL": "pillow",
    "dotenv": "python-dotenv",
    "cv2": "opencv-python-headless",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "dateutil": "python-dateutil",
    "googleapiclient": "google-api-python-client",
    "google_auth_oauthlib": "google-auth-oauthlib",
    "docx": "python-docx",
    "pptx": "python-pptx",
    "fitz": "pymupdf",
    "magic": "python-magic",
    "jose": "python-jose",
    "jwt": "PyJWT",
    "Crypto": "pycryptodome",
    "OpenSSL": "pyOpenSSL",
    "serial": "pyserial",
    "usb": "pyusb",
    "zmq": "pyzmq",
    "MySQLdb": "mysqlclient",
    "psycopg2": "psycopg2-binary",
    "attr": "attrs",
    "dns": "dnspython",
    "git": "GitPython",
    "github": "PyGithub",
    "telegram": "python-telegram-bot",
    "discord": "discord.py",
    "slugify": "python-slugify",
    "wikipediaapi": "wikipedia-api",
    "youtube_transcript_api": "youtube-transcript-api",
    "duckduckgo_search": "duckduckgo-search",
    "langchain_community": "langchain-community",
    "langchain_core": "langchain-core",
    "langchain_openai": "langchain-openai",
    "llama_index": "llama-index",
    "sentence_transformers": "sentence-transformers",
    "faiss": "faiss-cpu",
    "Levenshtein": "levenshtein",
    "markdownify": "markdownify",
    "tzlocal": "tzlocal",
    "pytz": "pytz",
    "lxml": "lxml",
    "websocket": "websocket-client",
    "socks": "PySocks",
    "multipart": "python-multipart",
}

# What the sandbox runtime itself brings (toolhub/runtime/requirements.txt): never inferred.
RUNTIME_MODULES = frozenset({"pydantic", "pydantic_core", "typing_extensions", "annotated_types", "typing_inspection"})
# Never a distribution: Open WebUI's own package (see the `open_webui_import` warning), the
# module name the runtime loads a toolkit as, and the base-class module the runtime gives agent
# strategies.
NOT_DISTRIBUTIONS = frozenset({"open_webui", "toolhub_toolkit", "toolhub_agent", "__future__"})


def needs_distribution(module: str, *, kind: str = "openwebui") -> bool:
    """Whether a top-level import name must come from an installed distribution."""
    if module in sys.stdlib_module_names or module in RUNTIME_MODULES or module in NOT_DISTRIBUTIONS:
        return False
    # RAGFlow plugins import their base class from `agent`, which the runtime's shim provides.
    return not (kind == "ragflow" and module == "agent")


def distribution_for(module: str, overrides: Mapping[str, str] | None = None) -> str:
    """The canonical distribution name for a top-level import name; `overrides` (an admin's
    mappings) win over the table."""
    if overrides and module in overrides:
        return canonicalize_name(overrides[module])
    return canonicalize_name(DISTRIBUTIONS.get(module, module))
