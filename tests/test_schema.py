"""One schema for every logged column: a check cannot log what the schema does not classify.

Every loggable attribute of every check in checks/ is either a series parameter, a run-only
attribute (``NOT_PARAMETERS``) or one of ReFrame's own; every metric the checks log has a
declared direction.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys

import pytest
import reframe as rfm
from conftest import REPO

from fabreg import schema
from fabreg.review.perflog import REFRAME_TESTCASE_ATTRIBUTES


def _check_classes() -> list[type]:
    classes = []
    for path in sorted((REPO / "checks").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"fabreg_checks_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # ReFrame finds a check's file through its module
        spec.loader.exec_module(module)
        classes += [c for _, c in inspect.getmembers(module, inspect.isclass)
                    if issubclass(c, rfm.RegressionTest) and c.__module__ == module.__name__]
    return classes


CHECKS = _check_classes()


def test_every_check_is_seen():
    names = {c.__name__ for c in CHECKS}
    assert {"OsuLatency", "OsuAllreduce", "Streams", "TailLatency", "Matmul",
            "UcxPerftestLatency", "IbWriteBw"} <= names


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_every_loggable_attribute_is_classified(check):
    reframe_own = {name for name, _ in rfm.RunOnlyRegressionTest.loggable_attrs()}
    unclassified = sorted(
        name for name, _ in check.loggable_attrs()
        if name not in schema.SERIES_PARAMETERS | schema.NOT_PARAMETERS | reframe_own
        | REFRAME_TESTCASE_ATTRIBUTES)
    assert unclassified == [], (
        f"{check.__name__} logs {unclassified}: add them to fabreg.schema "
        "(SERIES_PARAMETERS or NOT_PARAMETERS)")


def test_run_only_and_series_columns_do_not_overlap():
    assert not schema.SERIES_PARAMETERS & schema.NOT_PARAMETERS


@pytest.mark.parametrize("metric, lower", [
    ("loss_rate", True), ("comm_fraction", True), ("latency", True), ("bandwidth", False),
    ("busbw", False), ("msgrate", False), ("p99_over_p50", True), ("gflops", False),
    ("rate_min", False),
])
def test_declared_directions(metric, lower):
    assert schema.declared_direction(metric) == ("lower" if lower else "higher")
    assert schema.lower_is_better(metric) is lower
    # the unit never overrides a declaration
    assert schema.lower_is_better(metric, "MB/s" if lower else "us") is lower
