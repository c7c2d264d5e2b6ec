"""The screen of many windows at once against the search of one at a time: a window the
screen calls stable is one the search finds no change in, prepared to the same bits."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import fabreg

from fabreg.review import stable_screen, trend_state, trends
from fabreg.review.store import Store
from fabreg.review.synthetic import generate


def _windows(rng: np.random.Generator, rows: int, n: int, margin: int) -> np.ndarray:
    """Windows of every kind a night meets: noise of several sizes, steps, spikes, drifts,
    quantised values, values at and below zero."""
    level = rng.uniform(1, 1e4, (rows, 1))
    values = level * np.exp(rng.normal(0, rng.choice([0.001, 0.02, 0.1], (rows, 1)), (rows, n)))
    kind = rng.integers(0, 8, rows)
    at = rng.integers(margin, n, rows)
    for i in range(rows):
        if kind[i] == 1:  # a step, small or large
            values[i, at[i]:] *= rng.choice([0.5, 0.97, 1.02, 1.3])
        elif kind[i] == 2:  # a lone spike
            values[i, at[i]] *= 5
        elif kind[i] == 3:  # quantised: most differences 0
            values[i] = np.round(values[i] / level[i, 0]) * 1000
        elif kind[i] == 4:  # linear-mode values
            values[i, at[i]] = -values[i, at[i]]
        elif kind[i] == 5:  # a slow drift
            values[i] *= np.linspace(1, 1.1, n)
    return values


def _context(rng: np.random.Generator, values: np.ndarray, margin: int) -> list[trends.Window]:
    """What came before each window: nothing (a first run) or a state's summary, mostly of
    runs at the window's first level, some at another."""
    out = []
    for row in values:
        if margin == 0:
            out.append(trends.FULL)
            continue
        runs = int(rng.integers(0, 60))
        level = float(np.log(np.abs(row[:margin])).mean()) + rng.choice([0.0, 0.0, 0.3])
        out.append(trends.Window(margin, runs, level * runs, float(rng.uniform(0.001, 0.1)),
                                 int(rng.integers(0, 90))))
    return out


@pytest.mark.parametrize("n,margin", [(6, 0), (7, 0), (62, 0), (67, 7), (96, 7), (12, 7)])
def test_a_window_screened_stable_is_one_the_search_finds_stable_to_the_same_bits(n, margin):
    rng = np.random.default_rng(n * 100 + margin)
    rows = 400
    values = _windows(rng, rows, n, margin)
    context = _context(rng, values, margin)
    screened = stable_screen.stable_rows(values, context)
    stable = searched_stable = 0
    for i in range(rows):
        cps, prepared = trends.change_points(values[i].copy(), window=context[i])
        if n - margin >= 2 * trends.MIN_RUN:
            searched_stable += not cps
        got = screened[i]
        if got is None:
            continue
        stable += 1
        assert cps == [], (i, cps)
        assert np.array_equal(got.y, prepared.y), i
        assert (got.sigma, got.own_sigma, got.dof, got.log, got.scale) == (
            prepared.sigma, prepared.own_sigma, prepared.dof, prepared.log, prepared.scale), i
    # the screen leaves to the search only what it must: values at or below zero, quantised
    # noise, and windows whose best split is near the bar
    if n - margin >= 2 * trends.MIN_RUN:
        assert stable >= 0.6 * searched_stable, (stable, searched_stable)
    else:
        assert stable == 0


def test_rows_the_screen_cannot_judge_are_left_to_the_search():
    rng = np.random.default_rng(7)
    values = 100 * np.exp(rng.normal(0, 0.02, (4, 40)))
    values[0, 5] = 0.0  # not all positive: the search works on linear values
    values[1, 9] = np.nan
    values[2] = np.round(values[2] / 100) * 100  # quantised: another noise estimate
    values[3, 20:] *= 0.5  # a step: a change to search for
    assert stable_screen.stable_rows(values, [trends.FULL] * 4) == [None] * 4


def _judged(db, monkeypatch, screen_from: int) -> list[tuple]:
    monkeypatch.setattr(stable_screen, "SCREEN_FROM", screen_from)
    with Store(db, create=False) as store:
        verdicts = trend_state.analyse(store)
        states = store.trend_states(trend_state.settings(trends.ALPHA, trends.MIN_SHIFT_PCT))
    return [(v.series.id, v.verdict, trend_state.changes_text(v.changes), v.noise_pct,
             v.before, states.get(v.series.id)) for v in verdicts]


def test_a_store_judged_with_the_screen_gets_the_verdicts_and_states_it_gets_without(
        tmp_path, monkeypatch):
    """The first run and a night after it, each on two copies of one store: every series'
    verdict, changes, noise and kept state the same with windows screened in blocks and
    with each searched alone."""
    data = generate(tmp_path / "logs", sessions=120, partitions=4, transports=("tcp",),
                    nodes=(2,), shifted=0.3, end_spikes=0.2, seed=11)
    nights = [tmp_path / "a.db", tmp_path / "b.db"]
    fabreg("ingest", "-q", str(data.root), db=nights[0], check=True)
    shutil.copyfile(nights[0], nights[1])
    calls = []
    screen, blocks_from = stable_screen.stable_rows, stable_screen.SCREEN_FROM
    monkeypatch.setattr(stable_screen, "stable_rows",
                        lambda *a, **k: calls.append(1) or screen(*a, **k))
    first = _judged(nights[0], monkeypatch, blocks_from)
    assert calls, "no block was screened"
    assert first == _judged(nights[1], monkeypatch, 10 ** 9)
    assert {v[1] for v in first} >= {trends.STABLE, trends.REGRESSION}
    screened = len(calls)
    again = _judged(nights[0], monkeypatch, blocks_from)
    assert len(calls) > screened, "no window was screened"
    assert again == _judged(nights[1], monkeypatch, 10 ** 9)


def test_a_full_re_evaluation_with_the_screen_gets_the_verdicts_it_gets_without(
        tmp_path, monkeypatch):
    """``fabreg trends`` without ``--incremental`` judges every series whole: the same
    verdicts, changes and noise with whole histories screened in blocks and without."""
    data = generate(tmp_path / "logs", sessions=90, partitions=4, transports=("tcp",),
                    nodes=(2,), shifted=0.3, end_spikes=0.2, seed=5)
    db = tmp_path / "a.db"
    fabreg("ingest", "-q", str(data.root), db=db, check=True)
    with Store(db, create=False) as store:
        series = store.load()

    def judged(screen_from: int) -> list[tuple]:
        monkeypatch.setattr(stable_screen, "SCREEN_FROM", screen_from)
        return [(v.series.id, v.verdict, trend_state.changes_text(v.changes), v.noise_pct)
                for v in trends.analyse(series)]

    found: list[int] = []  # windows the screen found stable

    def screen(*args, **kwargs):
        out = stable_screen_rows(*args, **kwargs)
        found.append(sum(p is not None for p in out))
        return out

    stable_screen_rows = stable_screen.stable_rows
    monkeypatch.setattr(stable_screen, "stable_rows", screen)
    monkeypatch.setattr(trends, "SCREENED_AT_ONCE", 80)  # parts of the series at a time
    with_screen = judged(stable_screen.SCREEN_FROM)
    assert len(found) >= 2 and sum(found) >= len(series) // 3, (found, len(series))
    assert with_screen == judged(10 ** 9)
    assert {v[1] for v in with_screen} >= {trends.STABLE, trends.REGRESSION}
