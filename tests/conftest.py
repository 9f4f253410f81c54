"""Shared test settings.

Tiny models and small tensors run faster on one thread: with torch's default
of one thread per core, two workers on a two-core machine slowed such ops
10-100x in measurements here. Tests that need more threads set them locally.
"""

import torch

torch.set_num_threads(1)
