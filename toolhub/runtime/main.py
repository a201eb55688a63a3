"""Start the sandbox runtime: `python -I /opt/runtime/main.py`, one request on stdin.

With -I the script's directory is not on sys.path, and putting it there would let this
package's module names shadow the toolkit's imports. Instead the directory is loaded as
a package under a fixed name, whatever the directory is called, so that its modules can
import each other relatively.
"""

import importlib
import importlib.util
import os
import sys

PACKAGE = "toolhub_runtime"


def _load_package() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        PACKAGE, os.path.join(here, "__init__.py"), submodule_search_locations=[here]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)


if __name__ == "__main__":
    _load_package()
    importlib.import_module(f"{PACKAGE}.runner").main()
