"""Flags the command-line tests share: a short KeyRecall that still compacts twice per
episode (6 turns at budget 160), so a run through the real commands takes seconds."""

TINY_ENV = [
    "--env.kwargs", "memory_length", "5", "obs_words_mean", "6", "obs_words_std", "1",
    "num_values", "4",
    "--compaction.budget", "160",
]  # fmt: skip
