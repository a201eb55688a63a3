"""Which distribution provides an imported module: the maintained table of names that differ
(`import bs4` comes from `beautifulsoup4`) and the modules that need no package at all.
No Django: the static checks of an upload use it.

The table covers the names Open WebUI toolkits use most and the classic mismatches; any name
not in it is taken as its own distribution name (`import requests` → `requests`).

Namespace packages share their top-level name among many distributions (`google`, `azure`),
so for them the dotted name decides: `google.oauth2` → `google-auth`, `google.cloud.storage`
→ `google-cloud-storage`, `azure.storage.blob` → `azure-storage-blob`. A namespace alone
(`import google`) names no distribution: the PyPI projects called `google` and `azure` are
a search scraper and a deprecated meta-package, never what a toolkit means.
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

# Namespace modules (dotted) with a distribution of their own; the longest match wins.
NAMESPACE_DISTRIBUTIONS: dict[str, str] = {
    "google.auth": "google-auth",
    "google.oauth2": "google-auth",
    "google.protobuf": "protobuf",
    "google.genai": "google-genai",
    "google.generativeai": "google-generativeai",
    "google.api_core": "google-api-core",
    "google.ai.generativelanguage": "google-ai-generativelanguage",
    "google.adk": "google-adk",
    "google.rpc": "googleapis-common-protos",
    "google.type": "googleapis-common-protos",
    "google.longrunning": "googleapis-common-protos",
    "azure.storage.filedatalake": "azure-storage-file-datalake",
    "azure.storage.fileshare": "azure-storage-file-share",
    "llama_index.core": "llama-index-core",
    "opentelemetry.sdk": "opentelemetry-sdk",
}
# Namespace modules whose next dotted part names the distribution: `prefix.part` comes from
# `prefix-part` (dots and underscores as dashes): `google.cloud.bigquery` → `google-cloud-bigquery`.
NAMESPACE_GROUPS = frozenset({
    "google.cloud",
    "azure",
    "azure.ai",
    "azure.cognitiveservices",
    "azure.communication",
    "azure.data",
    "azure.keyvault",
    "azure.messaging",
    "azure.mgmt",
    "azure.monitor",
    "azure.search",
    "azure.storage",
    "backports",
    "jaraco",
    "ruamel",
    "sphinxcontrib",
    "zope",
    "llama_index.embeddings",
    "llama_index.llms",
    "llama_index.readers",
    "llama_index.tools",
    "llama_index.vector_stores",
})
# Top-level names that are only namespaces: never a distribution by themselves.
NAMESPACE_ROOTS = frozenset({"google", "azure", "backports", "jaraco", "ruamel", "sphinxcontrib", "zope"})

# What the sandbox runtime itself brings (toolhub/runtime/requirements.txt): never inferred.
RUNTIME_MODULES = frozenset({"pydantic", "pydantic_core", "typing_extensions", "annotated_types", "typing_inspection"})
# Never a distribution: Open WebUI's own package (see the `open_webui_import` warning), the
# module name the runtime loads a toolkit as, and the base-class module the runtime gives agent
# strategies.
NOT_DISTRIBUTIONS = frozenset({"open_webui", "toolhub_toolkit", "toolhub_agent", "__future__"})


# The top-level packages of RAGFlow that the runtime's shim provides to plugin files.
RAGFLOW_SHIM_MODULES = frozenset({"agent", "plugin"})


def needs_distribution(module: str, *, kind: str = "openwebui") -> bool:
    """Whether a top-level import name must come from an installed distribution."""
    if module in sys.stdlib_module_names or module in RUNTIME_MODULES or module in NOT_DISTRIBUTIONS:
        return False
    # RAGFlow plugins import their base class from `agent` (older ones and forks from
    # `plugin`), which the runtime's shim provides.
    return not (kind == "ragflow" and module in RAGFLOW_SHIM_MODULES)


def is_namespace(module: str) -> bool:
    """Whether the dotted name is a namespace whose submodules come from different
    distributions, so that `from <module> import x` is an import of `<module>.x`."""
    return module in NAMESPACE_GROUPS or module in NAMESPACE_ROOTS


def distribution_for(module: str, overrides: Mapping[str, str] | None = None) -> str | None:
    """The canonical distribution name for an imported module (dotted or top-level), or None
    for a namespace alone. `overrides` (an admin's mappings, by top-level name) win."""
    parts = module.split(".")
    top = parts[0]
    if overrides and top in overrides:
        return canonicalize_name(overrides[top])
    for end in range(len(parts), 1, -1):
        prefix = ".".join(parts[:end])
        if prefix in NAMESPACE_DISTRIBUTIONS:
            return canonicalize_name(NAMESPACE_DISTRIBUTIONS[prefix])
    for end in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:end]) in NAMESPACE_GROUPS:
            return canonicalize_name("-".join(parts[: end + 1]))
    if top in NAMESPACE_ROOTS:
        return None
    return canonicalize_name(DISTRIBUTIONS.get(top, top))


# Affixes a project name often adds to its import name (`honcho-ai` gives `import honcho`).
_NAME_PREFIXES = ("python-", "py-")
_NAME_SUFFIXES = ("-ai", "-py", "-python", "-sdk", "-client", "-api", "-lib", "-binary", "-headless")


def name_provides(distribution: str, module: str) -> bool:
    """Whether a declared distribution's name says it provides the top-level `module`: equal
    to it once a common affix is taken off (`honcho-ai`, `python-docx`, `pyjwt-binary`)."""
    wanted = canonicalize_name(module.split(".")[0])
    candidates: set[str] = {canonicalize_name(distribution)}
    for prefix in _NAME_PREFIXES:
        candidates |= {c.removeprefix(prefix) for c in candidates}
    for suffix in _NAME_SUFFIXES:
        candidates |= {c.removesuffix(suffix) for c in candidates}
    return wanted in candidates
