"""A study page rebuilt from its artefact alone (``cxsim study --render``): the study file's
text, the selection and the outcome the artefact keeps, through the page writer. Above
``cxsim.studies.page`` (which writes artefacts) so the two import one way only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cxsim.studies.artefact import read_artefact


def render_artefact(path: str | Path) -> dict[str, Any]:
    """The page rebuilt from its artefact alone: ``markdown``, ``data`` (the JSON as
    written), ``name`` (the page's file stem), ``figure`` (its file name, or empty),
    and the study, selection and outcome it was computed from (to redraw the figure)."""
    from cxsim.studies.load import load_study
    from cxsim.studies.page import page_data, render
    from cxsim.studies.selection import select

    data = read_artefact(path)
    given = data["inputs"]
    study = load_study(given["study_file"], given["seeds"], given["budget"], given["study_text"])
    selection = select(study, tuple(given["only"]))
    outcome = {
        "runs": given["runs"],
        "stage0": given["stage0"],
        "settings": given["settings"],
        "predictions": given["predictions"],
        "made": given["made"],
    }
    made_by = data["made_by"]
    markdown = render(study, selection, outcome, made_by, given.get("figure", ""))
    rebuilt = page_data(study, selection, outcome, made_by, given)
    return {
        "markdown": markdown,
        "data": rebuilt,
        "name": given["name"],
        "figure": given.get("figure", ""),
        "study": study,
        "selection": selection,
        "outcome": outcome,
    }
