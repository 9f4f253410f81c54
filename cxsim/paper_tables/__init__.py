"""The paper's tables and claims in miniature, on independent seeds.

``cxsim tables`` (``tables``): Tables 1-4 over K seeds, its study file (``tables.toml``) run
through the study engine (``tables_study``: the file at a preset, its results as per-seed
results), read from the per-seed results (``tables_seeds``) onto a page (``tables_page``) with
its plots (``tables_plots``).
``cxsim verdicts`` (``verdicts``): a verdict on each of the paper's claims, its study file
(``verdicts.toml``, settings and claims written once) run through the study engine
(``cxsim/studies``); what its page adds to each claim (``verdicts_claims``), per-seed cells
(``verdicts_cells``), page (``verdicts_page``) and the adoption of an older cache
(``verdicts_adopt``). The runs are the pipeline's stages (``cxsim/pipeline``).
"""
