"""scripts/corpus_check.py over a folder of tool files written here in the shapes public
toolkits have: it reads them as an upload does (never running them), measures each content
once, leaves out files that are not tools, and counts what the compatibility page reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "corpus_check.py"

MULTILINE = '''"""
title: Notes
requirements: google-auth
"""
from google.oauth2 import service_account

try:
    import fitz
except ImportError:
    fitz = None


class Tools:
    def find(self, query: str) -> str:
        """Find notes.

        :param query: Words to look for,
            quoted to keep a phrase.
        """
        open("/tmp/corpus-check-ran", "w").write("ran")
        return query
'''

DECORATED = '''"""
title: Logged
"""
import requests


def logged(func):
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


class Tools:
    @logged
    def fetch(self, url: str) -> str:
        """Fetch a page.
        :param url: The page
        """
        return requests.get(url).text
'''


def _run(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(folder), *extra], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_corpus_check_measures_each_tool_file_once_without_running_it(tmp_path: Path) -> None:
    (tmp_path / "repo-a").mkdir()
    (tmp_path / "repo-b" / "tools").mkdir(parents=True)
    (tmp_path / "repo-a" / "notes.py").write_text(MULTILINE)
    (tmp_path / "repo-b" / "tools" / "notes.py").write_text(MULTILINE)  # a fork's copy
    (tmp_path / "repo-b" / "tools" / "logged.py").write_text(DECORATED)
    (tmp_path / "repo-b" / "tools" / "broken.py").write_text(DECORATED.replace("def fetch(self", "def fetch(self,,"))
    (tmp_path / "repo-b" / "test_notes.py").write_text("def test_nothing():\n    pass\n")
    marker = Path("/tmp/corpus-check-ran")
    marker.unlink(missing_ok=True)

    result = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tool files: 3 (and 1 copies of them left out); accepted by the upload checks: 2" in result.stdout
    assert "refused   repo-b/tools/broken.py: syntax" in result.stdout
    assert "files whose :param descriptions the 0.12.4 rule reads differently: 1" in result.stdout
    assert "files with decorated tools (spec depends on functools.wraps): 1" in result.stdout
    assert "files importing namespace packages: 1; imports left without a distribution: 0" in result.stdout
    assert "files offering optional packages: 1" in result.stdout
    assert not marker.exists()

    rows = {row["path"]: row for row in json.loads(_run(tmp_path, "--json").stdout)}
    notes = rows["repo-a/notes.py"]
    assert notes["namespace_imports"] == {"google.oauth2": "google-auth"}
    assert (notes["required"], notes["optional"], notes["multiline_params"]) == ([], ["pymupdf"], ["find"])
    assert rows["repo-b/tools/logged.py"]["required"] == ["requests"]


def test_a_folder_without_tool_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "pipe.py").write_text("class Pipe:\n    pass\n")
    result = _run(tmp_path)
    assert result.returncode == 2 and "no tool files" in result.stderr
