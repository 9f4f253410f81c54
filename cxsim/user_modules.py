"""Import a module the user names on the command line (``my_module:my/Env-v0``).

``python my_script.py`` and ``python -m`` search the current folder for modules; the
``cxsim`` console script does not (its ``sys.path`` starts at the script's own folder), so
a ``my_module.py`` next to the user would not be found. :func:`import_user_module` puts the
current working folder on ``sys.path`` first, after the installed packages, so that an
installed module of the same name still wins. Processes spawned later (``cxsim tables``,
``cxsim verdicts``) start with the parent's ``sys.path``, so they find the module too.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType


def put_cwd_on_path() -> str:
    """Append the current working folder to ``sys.path`` unless it is searched already (as
    itself or as ``""``); returns the folder."""
    cwd = os.getcwd()
    searched = {os.path.realpath(p or cwd) for p in sys.path}
    if os.path.realpath(cwd) not in searched:
        sys.path.append(cwd)
    return cwd


def import_user_module(name: str) -> ModuleType:
    """``importlib.import_module(name)``, searching the current working folder too."""
    put_cwd_on_path()
    return importlib.import_module(name)
