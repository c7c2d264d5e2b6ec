"""The node-count parameter and rank placement, without a ReFrame session."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from reframe.core.exceptions import ReframeError

from fabreg.testlib.base import max_nodes, node_counts


def _part(max_nodes=None, name="sys:part"):
    extras = {} if max_nodes is None else {"max_nodes": max_nodes}
    return SimpleNamespace(extras=extras, fullname=name)


@pytest.mark.parametrize("maxima,counts", [
    ([1], [1]), ([2], [1, 2]), ([4], [1, 2, 4]), ([6], [1, 2, 4, 6]),
    ([1, 16], [1, 2, 4, 8, 16]), ([None], [1]), ([3, 2], [1, 2, 3]),
])
def test_node_counts_from_partitions(maxima, counts):
    assert node_counts([_part(m) for m in maxima]) == counts


def test_outside_a_session_the_counts_are_one_and_two():
    assert node_counts() == [1, 2]


@pytest.mark.parametrize("bad", [0, -1, "4", 2.5, True])
def test_bad_max_nodes_names_the_partition(bad):
    with pytest.raises(ReframeError, match=r"partition sys:part: extras\['max_nodes'\] must be"):
        max_nodes(_part(bad))
