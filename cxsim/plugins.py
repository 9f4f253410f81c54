"""Registries that also take plug-ins: entries from the user's module or an installed package.

:data:`cxsim.estimators.ESTIMATORS` and :data:`cxsim.loss_modes.LOSS_MODES` are
:class:`Registry` dicts. Iterating one gives the entries cxsim holds; looking a
name up (``registry[name]``, ``name in registry``) also finds a plug-in:

- ``module:name``: ``name`` in ``module``, imported with the current working folder
  on the import path (:mod:`cxsim.user_modules`), e.g. ``--ppo.estimator my_gae:estimator``
  for a ``my_gae.py`` next to the user;
- an installed package's entry point in the registry's group (``cxsim.estimators``,
  ``cxsim.loss_modes``), looked up by its name, as Gymnasium and pytest find plug-ins::

      [project.entry-points."cxsim.estimators"]
      my-gae = "my_package.estimators:my_gae"

A plug-in is an instance of the registry's entry type (an :class:`~cxsim.estimators.Estimator`
or a :class:`~cxsim.loss_modes.LossModeSpec`), which declares what the registry needs (an
estimator: its function and whether it needs a critic). :meth:`Registry.check` validates a
name when a config is built and raises one line that says what to change. A name is
resolved again wherever it is used, so a spawned worker process that receives a config
finds the same plug-in (its working folder and import path are the parent's).
"""

from __future__ import annotations

import dataclasses
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from cxsim.user_modules import import_user_module

Entry = TypeVar("Entry")


class PluginError(KeyError, ValueError):
    """A name that is neither held by a registry nor a valid plug-in; its text is one line.

    A ``KeyError`` (a failed registry lookup) and a ``ValueError`` (what ``cxsim`` shows as
    a one-line usage error)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownName(PluginError):
    """A plain name (no ``module:``) that is neither held nor an installed plug-in's."""


def installed_plugins(group: str) -> dict[str, EntryPoint]:
    """The entry points installed packages declare in ``group``, by name."""
    return {point.name: point for point in entry_points(group=group)}


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


class Registry(dict[str, Entry], Generic[Entry]):
    """Entries by name (a ``dict``); a name it does not hold is resolved as a plug-in.

    Args:
        entries: cxsim's own entries; the first is the default.
        entry_type: the dataclass every entry and plug-in is an instance of.
        kind: what an entry is, for messages (``estimator``).
        group: the entry-point group installed plug-ins are declared in.
        declaration: the keyword arguments of ``entry_type`` a plug-in passes, as shown in
            the message for an undeclared one (``advantages=<function>, needs_critic=...``).
    """

    def __init__(
        self,
        entries: dict[str, Entry],
        *,
        entry_type: type[Entry],
        kind: str,
        group: str,
        declaration: str,
    ) -> None:
        super().__init__(entries)
        self.entry_type = entry_type
        self.kind = kind
        self.group = group
        self.declaration = declaration
        self._from_entry_points: dict[str, Entry] = {}

    # ------------------------------------------------------------------ lookups

    def __missing__(self, name: str) -> Entry:
        return self.resolve(name)

    def __contains__(self, name: object) -> bool:
        if dict.__contains__(self, name):
            return True
        if not isinstance(name, str):
            return False
        try:
            self.resolve(name)
        except PluginError:
            return False
        return True

    def choices(self) -> tuple[str, ...]:
        """The names cxsim holds, then those of installed plug-ins (not loaded)."""
        installed = [n for n in installed_plugins(self.group) if not dict.__contains__(self, n)]
        return (*self, *sorted(installed))

    def resolve(self, name: str) -> Entry:
        """The entry for ``name``: one cxsim holds, ``module:name``, or an installed plug-in.

        Raises :class:`PluginError` (one line) for an unknown name, a module that cannot be
        imported, a missing attribute, or an object that is not a declared entry.
        """
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        module, sep, attribute = name.rpartition(":")
        if sep:
            return self._from_module(name, module, attribute)
        if name in self._from_entry_points:
            return self._from_entry_points[name]
        point = installed_plugins(self.group).get(name)
        if point is None:
            raise UnknownName(self._unknown(self.kind.replace(" ", "_"), name))
        where = f"{name} (entry point {point.value} in group {self.group})"
        try:
            found = point.load()
        except Exception as error:  # whatever the plug-in's package raises while imported
            raise PluginError(f"{where}: cannot load it ({_first_line(error)})") from error
        entry = self._declared(where, found, point.value)
        self._from_entry_points[name] = entry
        return entry

    def check(self, field: str, name: str) -> None:
        """Raises a one-line ``ValueError`` naming ``field`` unless ``name`` resolves to a
        declared entry (a plug-in's module is imported to check it)."""
        try:
            self.resolve(name)
        except UnknownName:
            raise UnknownName(self._unknown(field, name)) from None

    # ------------------------------------------------------------------ plug-ins

    def _unknown(self, field: str, name: str) -> str:
        return (
            f"{field}={name!r} is unknown; choose one of: {', '.join(self.choices())}, "
            f"or module:name for your own {self.kind} (docs/training.md)"
        )

    def _from_module(self, name: str, module: str, attribute: str) -> Entry:
        if not module or not attribute:
            raise PluginError(f"{self.kind} {name!r}: give it as module:name")
        try:
            imported = import_user_module(module)
        except Exception as error:  # whatever the user's module raises while imported
            raise PluginError(
                f"{name}: cannot import module {module!r} ({_first_line(error)}); run cxsim "
                "from the folder that holds it, put it on PYTHONPATH or install it"
            ) from error
        if not hasattr(imported, attribute):
            raise PluginError(f"{name}: module {module!r} has no {attribute!r}")
        return self._declared(name, getattr(imported, attribute), name)

    def _declared(self, where: str, found: Any, target: str) -> Entry:
        """``found`` if it is a well-formed ``entry_type``; else a one-line PluginError."""
        kind = self.entry_type.__name__
        fields = dataclasses.fields(self.entry_type)  # type: ignore[arg-type]
        if not isinstance(found, self.entry_type):
            required = [
                f.name
                for f in fields[1:]  # the first field is the function itself
                if f.default is dataclasses.MISSING and f.name != "help"
            ]
            missing = [n for n in required if not hasattr(found, n)] or required
            name = getattr(found, "__name__", None)
            what = f"the {type(found).__name__} {name}" if name else f"a {type(found).__name__}"
            module, _, attribute = target.rpartition(":")
            raise PluginError(
                f"{where} declares no {', '.join(missing)}: it is {what}, not a "
                f"{self.entry_type.__module__}.{kind}; declare it in {module} as "
                f"`{attribute} = {kind}({self.declaration})`"
            )
        for f in fields:
            value = getattr(found, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                problem = "must be True or False"
            elif f.type == "str" and not isinstance(value, str):
                problem = "must be a str"
            elif value is None and f.default is None:
                continue  # an optional function or name left out
            elif f.type == "str | None" and not isinstance(value, str):
                problem = "must be a str or None"
            elif f.type == "str | None":
                continue
            elif f.type not in ("bool", "str") and not callable(value):
                problem = "must be a function"
            else:
                continue
            raise PluginError(f"{where} declares {f.name}={value!r}: it {problem}")
        return found
