"""ReFrame's deprecation warnings with the cheap frame walk: the same warnings, pointing at
the same user line, as with ReFrame's own ``inspect.stack()`` (the time saved:
ci/bench/reframe_load_bench.py)."""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings

import pytest
import reframe as rfm
import reframe.core.warnings as rfm_warnings

from fabreg.testlib import reframe_warnings


def _deprecated_use() -> list[tuple[str, int, str]]:
    """A check class that still sets ``variables`` (ReFrame: use ``env_vars``): ReFrame
    warns from its metaclass, several of its own frames below the user's class body."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        class OldStyle(rfm.RunOnlyRegressionTest):
            variables = {"A": "1"}

        def indirect() -> None:
            rfm_warnings.user_deprecation_warning("called from a user's function")

        indirect()
    return [(w.filename, w.lineno, str(w.message)) for w in caught]


def test_the_frame_walk_warns_what_and_where_reframes_own_does(monkeypatch):
    monkeypatch.setattr(rfm_warnings, "inspect", inspect)  # ReFrame's own walk
    reframes = _deprecated_use()
    reframe_warnings.install()
    assert reframe_warnings.installed()
    ours = _deprecated_use()
    assert ours == reframes
    (class_body, function) = ours
    source = inspect.getsource(_deprecated_use).splitlines()
    first = _deprecated_use.__code__.co_firstlineno
    # the user's lines, never a line inside ReFrame
    assert class_body[0] == function[0] == __file__
    assert "class OldStyle" in source[class_body[1] - first]
    assert "'variables' is deprecated" in class_body[2]
    assert "user_deprecation_warning" in source[function[1] - first]


def test_install_is_idempotent_and_leaves_the_rest_of_inspect_alone(monkeypatch):
    monkeypatch.setattr(rfm_warnings, "inspect", inspect)
    reframe_warnings.install()
    walk = rfm_warnings.inspect
    reframe_warnings.install()
    assert rfm_warnings.inspect is walk
    assert walk.getmodule(inspect.getsource) is inspect  # not a frame: inspect's answer
    assert walk.signature is inspect.signature


def test_the_suites_checks_install_it_before_reframe_instantiates_them():
    """Importing what every check imports (a fresh process: nothing installed it before)."""
    probe = ("import inspect, reframe.core.warnings as w; assert w.inspect is inspect; "
             "import fabreg.testlib.base; print(type(w.inspect).__name__)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "FrameWalk"


@pytest.fixture(autouse=True)
def _leave_it_installed():
    """The process's other tests instantiate ReFrame checks: leave them the cheap walk."""
    yield
    reframe_warnings.install()
