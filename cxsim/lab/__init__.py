"""Estimator lab: advantage estimators against exact ground truth on synthetic processes.

``process`` simulates segmented rollouts whose true values and advantages are
known in closed form; ``measure`` runs the estimators of the trainer's registry
(:data:`cxsim.estimators.ESTIMATORS`, plug-ins included) on them and reports bias,
noise and correlation;
``backend`` picks NumPy or CuPy and hands arrays to torch without copies.
The entry point is ``cxsim/lab/lab.py`` (``cxsim lab``).
"""
