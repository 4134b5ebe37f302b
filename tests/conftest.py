"""Shared fixtures: one context for the whole run, on DLPRIM_TEST_DEVICE or the default
(with a GPU vendor's device facts under --device-facts: tests/vendor_facts.py)."""
import os

import numpy as np
import pytest

import dlprim as dp
import tiers
import vendor_facts


def pytest_addoption(parser):
    vendor_facts.add_option(parser)


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(getattr(pytest.mark, tiers.tier_of(item.module.__name__)))


def pytest_report_header(config):
    return vendor_facts.header(config)


@pytest.fixture(scope="session")
def ctx(request):
    return vendor_facts.apply(dp.Context(os.environ.get("DLPRIM_TEST_DEVICE") or None),
                              request.config)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
