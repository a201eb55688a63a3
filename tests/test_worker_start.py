"""A worker says at start when it cannot sandbox, instead of at the first invocation."""

import logging

from toolhub.toolkits.sandboxing import startup_check


def test_a_worker_without_bubblewrap_says_so_at_start(settings, caplog):
    settings.TOOLHUB_BWRAP = "/nonexistent/bwrap"
    with caplog.at_level(logging.ERROR):
        startup_check()
    assert "cannot run toolkits" in caplog.text
    assert "bubblewrap" in caplog.text


def test_a_worker_with_a_working_sandbox_says_nothing(caplog):
    with caplog.at_level(logging.ERROR):
        startup_check()
    assert caplog.text == ""
