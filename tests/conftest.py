"""Shared test settings.

Tiny models and small tensors run faster on one thread: with torch's default
of one thread per core, two workers on a two-core machine slowed such ops
10-100x in measurements here. Tests that need more threads set them locally.
"""

import os

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _restore_quiet():
    """``cxsim ... --quiet`` run in-process sets CXSIM_QUIET for its process; put it back so
    that it does not silence later tests."""
    before = os.environ.get("CXSIM_QUIET")
    yield
    if before is None:
        os.environ.pop("CXSIM_QUIET", None)
    else:
        os.environ["CXSIM_QUIET"] = before
