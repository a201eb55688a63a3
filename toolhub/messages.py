"""Messages ToolHub stores for people to read later, such as a revision's status detail or why a
run failed: a code and its parameters, rendered in English for the API and the logs and in the
reader's language on the pages, never parsed back from text.

Each code has exactly one English form, which is also its msgid in the catalogues (`FORMS`). A
parameter is text shown as written (a package name, an admin's reason, a tool's own error), a
number, another message (the sandbox's reason inside "Loading the toolkit failed: …") or a
list of messages, shown joined with "; ". Two codes have no form of their own: `as_written`,
text shown as it is (a failure no form describes), and `list`, messages joined with "; ".

No Django here: the Django-free parts that explain failures (toolhub.packages.build_runner)
and refuse egress hosts (toolhub.sandbox.egress.rules) write messages too. Pages render with
Django's gettext, passed in as `translate`; `stored_fields` and `shown` are how models keep a
message with its English text beside it and show it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias


def gettext_noop(text: str) -> str:
    """Marks `text` for makemessages, which extracts every call by this name, and returns it
    untranslated."""
    return text


AS_WRITTEN = "as_written"
LIST = "list"

FORMS: dict[str, str] = {
    # A revision's status detail (Revision.status_message): toolhub.toolkits.lifecycle and
    # building, toolhub.runs.tool_tests.
    "approval.waiting": gettext_noop("Waiting for an admin to approve: %(names)s"),
    "package.rejected_because": gettext_noop("package %(name)s was rejected: %(reason)s"),
    "package.rejected": gettext_noop("package %(name)s was rejected"),
    "build.queued": gettext_noop("Queued for build"),
    "build.locking": gettext_noop("Locking the requirements"),
    "build.environment": gettext_noop("Building the environment"),
    "build.inspecting": gettext_noop("Inspecting the tools in the sandbox"),
    "build.interrupted": gettext_noop("The build was interrupted (its worker stopped); press Retry to build again."),
    "build.not_taken": gettext_noop(
        "No worker took the build although its task was sent %(sends)s times (is a worker serving the %(queue)s"
        " queue?); press Retry to build again."
    ),
    "build.overdue": gettext_noop(
        "The build made no progress for longer than a build may take; press Retry to build again."
    ),
    "build.queue_failed": gettext_noop(
        "No worker could take the build (the broker is unavailable); press Retry once it is back."
    ),
    "build.timed_out": gettext_noop("build timed out after %(seconds)s s"),
    "build.internal_error": gettext_noop("internal error during build (%(error)s); see the worker log"),
    "introspection.load_failed": gettext_noop("Loading the toolkit failed: %(error)s"),
    "introspection.refused": gettext_noop("The toolkit's introspection was refused: %(error)s."),
    "introspection.internal_error": gettext_noop(
        "Internal error while inspecting the toolkit (%(error)s); see the worker log."
    ),
    # Why the sandbox ended a run without a result (toolhub.toolkits.sandboxing.outcome_reason).
    "sandbox.not_loaded": gettext_noop("the toolkit could not be loaded"),
    "sandbox.timed_out": gettext_noop("the sandbox ran out of time"),
    "sandbox.limit": gettext_noop("a sandbox limit was hit (%(limit)s)"),
    "sandbox.crashed": gettext_noop("the sandbox process ended unexpectedly (exit code %(code)s)"),
    # Why a build step failed (toolhub.packages.build_runner.explain_failure).
    "step.index_unreachable": gettext_noop("index unreachable: %(where)s"),
    "step.hash_mismatch": gettext_noop("hash mismatch for %(name)s: the index serves other files than the lock names"),
    "step.no_distribution_constrained": gettext_noop("No matching distribution for %(name)s (constrained to %(limits)s)"),
    "step.no_distribution": gettext_noop("No matching distribution for %(name)s"),
    "step.constraint_contradicts_requirement": gettext_noop(
        "constraint %(constraint)s contradicts requirement %(requirement)s"
    ),
    "step.constraint_contradicts_dependency": gettext_noop(
        "constraint %(constraint)s contradicts %(who)s, which requires %(requirement)s"
    ),
    "step.package_build_failed_because": gettext_noop("%(name)s failed to build: %(detail)s"),
    "step.package_build_failed": gettext_noop("%(name)s failed to build"),
    "step.download_limit": gettext_noop("%(tool)s stopped at the build's download limit of %(size)s"),
    "step.connection_limit": gettext_noop(
        "%(tool)s opened more than %(count)s connections at once through the build's egress proxy"
    ),
    "step.failed": gettext_noop("%(tool)s failed: %(error)s"),
    "step.exited": gettext_noop("%(tool)s exited with status %(status)s"),
    # Reviews (lifecycle.review_needed, review_decide).
    "review.waiting": gettext_noop("Waiting for an admin to review it: it would receive %(what)s."),
    "review.secrets_and_grant": gettext_noop("the secret Valves %(names)s and the network egress grant"),
    "review.secrets": gettext_noop("the secret Valves %(names)s"),
    "review.grant": gettext_noop("the network egress grant"),
    "review.rejected": gettext_noop("Rejected in review by %(admin)s: %(reason)s"),
    # Tool tests (lifecycle.tests_begin, tests_done; toolhub.runs.tool_tests).
    "tests.running": gettext_noop("Running its %(n)s tests"),
    "tests.failed": gettext_noop(
        "%(failed)s of its %(total)s tests failed (%(names)s); an admin may still approve it."
    ),
    "tests.worker_stopped": gettext_noop("The worker running these tests stopped before they finished."),
    "tests.internal_error": gettext_noop("Internal error while running the tests (%(error)s); see the worker log."),
    # How a saved tool test's case failed (toolhub.toolkits.tool_checks.evaluate,
    # toolhub.runs.tool_tests) and why a test run ended (also tests.worker_stopped and
    # tests.internal_error above).
    "tests.expected_failure": gettext_noop("The call succeeded; it was expected to fail."),
    "tests.error_lacks": gettext_noop("The error does not contain %(value)s."),
    "tests.call_failed": gettext_noop("The call failed: %(error)s"),
    "tests.equals_differs": gettext_noop("Check %(n)s (equals): the result differs."),
    "tests.contains_missing": gettext_noop("Check %(n)s (contains): the result does not contain %(value)s."),
    "tests.regex_timed_out": gettext_noop("Check %(n)s (regex): the regular expression ran longer than %(seconds)s s."),
    "tests.regex_unmatched": gettext_noop("Check %(n)s (regex): the result does not match %(value)s."),
    "tests.path_missing": gettext_noop("Check %(n)s (json_path): the result has nothing at %(path)s."),
    "tests.path_differs": gettext_noop("Check %(n)s (json_path): the value at %(path)s differs."),
    "tests.no_tool": gettext_noop("This revision has no tool named %(tool)s."),
    "tests.unfinished": gettext_noop("The call did not finish."),
    "tests.not_taken": gettext_noop("No worker took these tests (is a worker serving the sandbox queue?)."),
    "tests.replaced": gettext_noop("Replaced by a new run of the revision's tests."),
    "tests.queue_failed": gettext_noop("No worker could take the tests (the broker is unavailable)."),
    # Why an egress allowlist entry is refused (toolhub.sandbox.egress.rules).
    "host.not_pattern": gettext_noop(
        "%(pattern)s is not a host name or a wildcard like '*.example.org' (a '*' may only stand as the whole first"
        " label)"
    ),
    "host.invalid": gettext_noop("%(pattern)s is not a valid host name"),
    "host.whole_tld": gettext_noop("%(pattern)s would allow a whole top-level domain"),
    # Why a run failed (Invocation.error_message): toolhub.runs.engine and services. A tool's
    # own error is stored as written.
    "run.timed_out": gettext_noop("The tool ran longer than %(seconds)s s and was stopped."),
    "run.too_many_events": gettext_noop("The tool sent more than %(count)s events and was stopped."),
    "run.too_many_event_bytes": gettext_noop("The tool sent more than %(count)s bytes of events and was stopped."),
    "run.sandbox_limit": gettext_noop("The tool hit a sandbox limit (%(limit)s) and was stopped."),
    "run.internal_error": gettext_noop("Internal error in the worker (%(error)s)."),
    "run.environment_failed_on": gettext_noop("The toolkit's environment could not be built on %(host)s: %(reason)s"),
    # Stored before the host was named.
    "run.environment_failed": gettext_noop("The toolkit's environment could not be built: %(reason)s"),
    "run.not_recorded": gettext_noop("The worker could not record the run: %(error)s"),
    "run.queue_failed": gettext_noop("No worker could take the invocation (the broker is unavailable)."),
    "run.not_taken": gettext_noop(
        "No worker took this invocation although its task was sent %(count)s times (%(why)s)."
    ),
    "run.workers_busy": gettext_noop("the workers were busy with other invocations"),
    "run.no_worker": gettext_noop("is a worker serving the sandbox queue?"),
    "run.cancelled": gettext_noop("Cancelled by %(user)s."),
    # Why an agent run failed (AgentRun.error_message): toolhub.agents.engine.
    "agent.out_of_time": gettext_noop("The run used its %(seconds)s s and stops here."),
    "agent.max_iterations": gettext_noop("The model was called max_iterations (%(count)s) times; the run stops here."),
    "agent.out_of_tokens": gettext_noop("The run used its budget of %(count)s tokens and stops here."),
    "agent.connection_deleted": gettext_noop("The model connection was deleted."),
    "agent.environment_failed": gettext_noop("The strategy's environment could not be built: %(reason)s"),
    "agent.model_failed": gettext_noop("The model call failed: %(error)s"),
    "agent.strategy_failed": gettext_noop("The strategy failed: %(error)s"),
    "agent.strategy_timed_out": gettext_noop("The strategy ran longer than %(seconds)s s of its own time."),
}

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")

# Text as written, a number, a message, or messages shown joined with "; ".
Param: TypeAlias = "str | int | float | Message | list[Message]"


def _same(text: str) -> str:
    return text


@dataclass(frozen=True)
class Message:
    """A code of FORMS (or AS_WRITTEN, LIST) and what fills its placeholders."""

    code: str
    params: Mapping[str, Param] = field(default_factory=dict)

    def render(self, translate: Callable[[str], str] = _same) -> str:
        """The message with its parameters; its form through `translate` (the English form
        itself by default), the parameters' text as written."""
        if self.code == AS_WRITTEN:
            return str(self.params["text"])
        if self.code == LIST:
            return _render_param(self.params["items"], translate)
        return translate(FORMS[self.code]) % {name: _render_param(value, translate) for name, value in self.params.items()}

    def english(self) -> str:
        return self.render()

    def __str__(self) -> str:
        return self.render()

    def to_json(self) -> dict[str, Any]:
        """{"code": …, "params": {…}}, with a message among the parameters as such a dict too."""
        return {"code": self.code, "params": {name: _param_json(value) for name, value in self.params.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Message | None:
        """The message `to_json` stored; None for an empty value (no message)."""
        if not data:
            return None
        return cls(str(data["code"]), {name: _param_from_json(value) for name, value in (data.get("params") or {}).items()})


def message(code: str, /, **params: Param) -> Message:
    """The message of `code`; its parameters must be exactly the placeholders of its form."""
    wanted = set(_PLACEHOLDER.findall(FORMS[code]))
    if set(params) != wanted:
        raise ValueError(f"{code} takes {sorted(wanted)}, not {sorted(params)}")
    return Message(code, params)


def as_written(text: str) -> Message:
    """Text no form describes (a tool's own error, a failure in its own words), shown as it is."""
    return Message(AS_WRITTEN, {"text": text})


def joined(items: Sequence[Message]) -> Message:
    """Several messages shown one after the other, separated by "; "."""
    return Message(LIST, {"items": list(items)})


def stored_fields(stored: Message | None, *, text: str, data: str) -> dict[str, object]:
    """A message as the two fields a row keeps it in, for save() or update(): `data` holds
    the message ({} for none), `text` its English rendering ("" for none), so that they always
    agree."""
    if stored is None:
        return {text: "", data: {}}
    return {text: stored.english(), data: stored.to_json()}


def shown(data: Mapping[str, Any] | None, text: str, translate: Callable[[str], str]) -> str:
    """A stored message through `translate`; `text` (the English stored beside it) when no
    message was stored."""
    stored = Message.from_json(data)
    return stored.render(translate) if stored is not None else text


def _render_param(value: Param, translate: Callable[[str], str]) -> str:
    if isinstance(value, Message):
        return value.render(translate)
    if isinstance(value, list):
        return "; ".join(item.render(translate) for item in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _param_json(value: Param) -> Any:
    if isinstance(value, Message):
        return value.to_json()
    if isinstance(value, list):
        return [item.to_json() for item in value]
    return value


def _param_from_json(value: Any) -> Param:
    if isinstance(value, dict):
        return Message.from_json(value) or as_written("")
    if isinstance(value, list):
        return [Message.from_json(item) or as_written("") for item in value]
    return value
