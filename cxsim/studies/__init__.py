"""Studies as files: a researcher's own question on paired independent seeds, from one TOML file.

``cxsim study FILE.toml`` (cxsim/studies/study.py) runs what the file names through the
machinery of ``cxsim verdicts``: independent seeds, each with its own SFT base, training
seed and evaluation tasks; every arm of a seed trained from that seed's base; each claim
two evaluations paired by seed (Student-t interval, a verdict, the smallest effect the run
could detect); predictions written before the run; one cache entry per (setting, seed,
arm), so a killed or widened study pays only for what is new. The file's keys:
docs/reference/study-files.md.

One topic per module:

- :mod:`cxsim.studies.spec`: the file's frozen dataclasses, and its budgets and seeds parsed
  and validated; :mod:`cxsim.studies.settings`: its settings, arms and stage-0 tables;
  :mod:`cxsim.studies.claims`: its ``[[claims]]`` and ``[[evaluations]]``;
  :mod:`cxsim.studies.sides`: the names a side may take besides an arm's (``oracle``,
  ``scripted:P``, an ``[eval_envs.NAME]``); :mod:`cxsim.studies.load`: the file read whole
  (:func:`~cxsim.studies.load.load_study`; its metrics, figure and diagnostics), every name
  checked before any run;
- :mod:`cxsim.studies.selection`: what one invocation runs (``--only``);
- :mod:`cxsim.studies.stage0`: a stage-0 checkpoint (candidates until one copies), cached;
- :mod:`cxsim.studies.runner`: one (setting, seed, arm) unit as one function call with
  plain arguments, cached, and the claim sides whose summaries another arm writes; the study
  as a map of units over an executor; :mod:`cxsim.studies.side_runs`: the sides with the
  oracle acting, a scripted summarizer or another env, each one such call;
  :mod:`cxsim.studies.unit_files`: where a unit's files go in the runs folder;
- :mod:`cxsim.studies.executors`: where units run (this machine's processes, or Ray tasks
  with ``--executor ray``); :mod:`cxsim.studies.calls`: a call's stages read from the cache
  or made, and calls mapped through an executor, one log line each;
- :mod:`cxsim.studies.stats`: claims from per-seed results (intervals and power from
  cxsim/tables.py; what the engine refuses: too few seeds, degenerate claims);
  :mod:`cxsim.studies.history`: what a study reads from a run's training history (the
  success curve, the bounds of its keys); :mod:`cxsim.studies.correction`: Holm-Bonferroni
  over a page's claims; :mod:`cxsim.studies.outcomes`: each claim's comparison from the
  units' results, with the correction applied;
- :mod:`cxsim.studies.where`: a study's folder (keyed by its file) and its page's name (a
  narrowed run's beside the full one); :mod:`cxsim.studies.artefact`: what a page is
  computed from, kept in its JSON, and the page rebuilt from that alone (``--render``);
- :mod:`cxsim.studies.page`: the Markdown page from plain results;
  :mod:`cxsim.studies.page_claims`: its claims and predictions;
  :mod:`cxsim.studies.page_settings`: its tables of every setting that decides a number;
- :mod:`cxsim.studies.commands`: the ``cxsim sft`` / ``train`` / ``eval`` command lines that
  make one seed's runs.

The package drives the stages of :mod:`cxsim.pipeline` (it sits above them); of the
commands, only the ones that run studies import it: ``cxsim study``, ``cxsim verdicts``
(cxsim/paper_tables/verdicts.py, whose runs are a study built from its presets) and ``cxsim
tables`` (cxsim/paper_tables/tables.py, which runs cxsim/paper_tables/tables.toml).
"""
