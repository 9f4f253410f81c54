"""Import a module the user names on the command line (``my_module:my/Env-v0``).

``python my_script.py`` and ``python -m`` search the current folder for modules; the
``cxsim`` console script does not (its ``sys.path`` starts at the script's own folder), so
a ``my_module.py`` next to the user would not be found. :func:`import_user_module` puts the
current working folder on ``sys.path`` first, after the installed packages, so that an
installed module of the same name still wins. Processes spawned later (``cxsim tables``,
``cxsim verdicts``) start with the parent's ``sys.path``, so they find the module too.
:func:`missing_module` and :func:`missing_attribute` say what a mistyped name missed, with
the close match.
"""

from __future__ import annotations

import difflib
import importlib
import os
import pkgutil
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


def _did_you_mean(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def missing_module(name: str, error: BaseException) -> str | None:
    """``no module 'my_adaptrs' (did you mean 'my_adapters'?)`` when importing ``name`` failed
    because it, or a package above it, does not exist (the close match among its siblings);
    None when the module was found and failed while it ran (a module it imports missing)."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if not missing or not (name == missing or name.startswith(missing + ".")):
        return None
    parent = missing.rpartition(".")[0]
    try:
        path = importlib.import_module(parent).__path__ if parent else None
    except (ImportError, AttributeError):  # an unimportable parent, or a plain module
        path = []
    put_cwd_on_path()
    prefix = f"{parent}." if parent else ""
    siblings = [prefix + module.name for module in pkgutil.iter_modules(path)]
    return f"no module {missing!r}{_did_you_mean(missing, siblings)}"


def missing_attribute(module: ModuleType, attribute: str) -> str:
    """``module 'my_adapters' has no 'gea' (did you mean 'gae'?)``."""
    public = [n for n in dir(module) if not n.startswith("_")]
    return f"module {module.__name__!r} has no {attribute!r}{_did_you_mean(attribute, public)}"
