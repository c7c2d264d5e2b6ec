"""The launches a repeat takes: OSU measures every size of its ``-m low:high`` range.

A repeat of the sizes that are not settled yet runs the benchmark over the range from the
smallest to the largest of them, and OSU measures every power of two in it. Of ``osu_bw``'s
repeat at 64 KiB, 1 MiB and 4 MiB the sizes no verdict reads (128-512 KiB, 2 MiB) are about
a third of the time, where the time of a size grows with the size. A launch of its own costs
the start and end of the MPI job instead. So a repeat is split where the sizes between two
asserted ones cost more than a launch, as the job's first run over the whole curve timed
them, and kept whole where they do not (or where the first run's rows came in one burst and
said nothing of what each size costs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def size_seconds(printed_at: Mapping[int, float]) -> dict[int, float]:
    """Seconds each size took in a run: the time from the row before it to its own row.

    ``printed_at``: size -> when its row was printed (seconds, any clock). The first size
    has no row before it, and is left out: what it took is part of the launch's own cost.
    """
    sizes = sorted(printed_at)
    return {size: max(0.0, printed_at[size] - printed_at[before])
            for before, size in zip(sizes, sizes[1:], strict=False)}


def launch_seconds(run_s: float, costs: Mapping[int, float]) -> float:
    """What a launch costs beyond its sizes: the run's time less what its sizes took."""
    return max(0.0, run_s - sum(costs.values()))


def repeat_ranges(sizes: Sequence[int], curve: Sequence[int], costs: Mapping[int, float],
                  launch_s: float) -> list[tuple[int, int]]:
    """The ``(low, high)`` ranges of the launches that measure ``sizes`` once more.

    ``curve``: every size the benchmark runs; ``costs``: seconds a size takes
    (:func:`size_seconds`; a size missing from it keeps its neighbours in one launch);
    ``launch_s``: what a launch costs beyond its sizes (:func:`launch_seconds`).
    """
    ranges: list[tuple[int, int]] = []
    for size in sorted(set(sizes)):
        if ranges:
            low, high = ranges[-1]
            between = [s for s in curve if high < s < size]
            if any(s not in costs for s in between) or sum(costs[s] for s in between) <= launch_s:
                ranges[-1] = (low, size)
                continue
        ranges.append((size, size))
    return ranges
