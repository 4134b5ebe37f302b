"""Shared fixtures: one context for the whole run, on DLPRIM_TEST_DEVICE or the default."""
import os

import numpy as np
import pytest

import dlprim as dp


@pytest.fixture(scope="session")
def ctx():
    return dp.Context(os.environ.get("DLPRIM_TEST_DEVICE") or None)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
