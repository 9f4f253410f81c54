"""The main job's pipeline, as library code: behaviour cloning (``sft``), PPO with context
compaction (``train``, its run plumbing in ``training_run``), evaluation under both protocols
(``evaluate``), the main job that chains them (``run``, its table in ``run_table``), the
shipped checkpoints' regeneration (``pretrain``), the named PPO presets (``presets``) and the
critic probe (``critic_probe``).

Each stage module keeps its command's ``main(argv)`` (tyro), which ``cxsim/cli.py`` dispatches
to; the study engine (``cxsim/studies``) calls the stages' functions directly.
"""
