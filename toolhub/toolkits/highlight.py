"""Python syntax highlighting for the Source tab, done on the server with Pygments."""

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

_FORMATTER = HtmlFormatter(linenos="table", cssclass="source", anchorlinenos=True, lineanchors="L")


def highlight_python(source: str) -> str:
    # Pygments escapes every token, so hostile source cannot inject markup.
    return highlight(source, PythonLexer(), _FORMATTER)


def stylesheet() -> str:
    return _FORMATTER.get_style_defs(".source")
