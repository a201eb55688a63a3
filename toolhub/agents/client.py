"""The one place that talks to a model connection, with the official `openai` client.

Messages raised from here are shown on pages and stored on runs, so they never carry the API
key or a header value: `ModelError` scrubs them out of whatever the endpoint or the client said.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx2 as httpx
import openai
from django.utils.translation import gettext as _

if TYPE_CHECKING:
    from toolhub.agents.models import ModelConnection

# Ollama and llama.cpp's server take any key, but the client refuses to start without one.
_NO_KEY = "no-key"
_MAX_MESSAGE = 300


class ModelError(Exception):
    """The endpoint could not be reached or answered with an error."""


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "********")
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def _describe(exc: openai.OpenAIError) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return _("The endpoint did not answer in time.")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        if isinstance(cause, (httpx.RemoteProtocolError, httpx.ReadError)):
            # It was reached and began to answer, then the connection closed mid-answer.
            return _("The endpoint's answer was cut off before it was complete: %(cause)s") % {"cause": cause}
        return _("Could not connect to the endpoint: %(cause)s") % {"cause": cause}
    if isinstance(exc, openai.APIStatusError):
        detail = exc.message or ""
        return _("The endpoint answered HTTP %(status)d: %(detail)s") % {"status": exc.status_code, "detail": detail}
    return _("The endpoint's answer could not be read: %(error)s") % {"error": exc}


class Client:
    """An `openai.OpenAI` for one connection: no retries (the run's limits are the host's,
    and a retry would double the tokens spent), the connection's time-out and headers."""

    def __init__(self, connection: ModelConnection, *, timeout: float | None = None) -> None:
        self._key = connection.api_key()
        headers = connection.extra_headers()
        self._secrets = [self._key, *headers.values()]
        self.timeout = timeout if timeout is not None else connection.timeout_seconds
        self._client = openai.OpenAI(
            base_url=connection.base_url,
            api_key=self._key or _NO_KEY,
            default_headers=headers or None,
            timeout=self.timeout,
            max_retries=0,
        )

    def _fail(self, exc: Exception) -> ModelError:
        message = _describe(exc) if isinstance(exc, openai.OpenAIError) else _("The endpoint's answer could not be read: %(error)s") % {"error": exc}
        return ModelError(_scrub(message, self._secrets))

    def list_models(self, *, limit: int = 500) -> list[str]:
        try:
            page = self._client.models.list()
            names = []
            for model in page:
                names.append(str(model.id)[:200])
                if len(names) >= limit:
                    break
        except Exception as exc:  # noqa: BLE001 - every failure becomes one readable line
            raise self._fail(exc) from None
        return sorted(set(names))

    def chat(self, **kwargs: Any) -> dict[str, Any]:
        """One chat completion (never streamed); the answer as plain JSON. An answer that is
        not one (an HTML page, an error object with status 200, a proxy's JSON) is a ModelError
        that shows the start of what came back."""
        try:
            completion: Any = self._client.chat.completions.create(stream=False, **kwargs)
            # The client builds its models without validating them, and hands back the text
            # of an answer that is not JSON at all.
            answer = completion.model_dump(mode="json", exclude_unset=True) if hasattr(completion, "model_dump") else completion
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc) from None
        if not _is_completion(answer):
            raise ModelError(_scrub(_("The endpoint's answer is not a chat completion: %(answer)s") % {"answer": _show(answer)}, self._secrets))
        return answer


def _is_completion(answer: Any) -> bool:
    """A chat completion has a list of choices, the first with a message (an object)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list) or not answer["choices"]:
        return False
    first = answer["choices"][0]
    return isinstance(first, dict) and isinstance(first.get("message"), dict)


def _show(answer: Any) -> str:
    """The start of an answer for a message: JSON as JSON, anything else as its text."""
    if isinstance(answer, str):
        return answer[:_MAX_MESSAGE] or _("(an empty body)")
    try:
        return json.dumps(answer, ensure_ascii=False)[:_MAX_MESSAGE]
    except (TypeError, ValueError):
        return repr(answer)[:_MAX_MESSAGE]
