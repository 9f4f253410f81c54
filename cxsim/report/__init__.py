"""``cxsim report RUN_DIR``: the Markdown report of a finished run folder (``report``), its
learning curves (``report_curves``) and its fact-survival table (``report_survival``).
``cxsim run`` writes the same report at its end.
"""
