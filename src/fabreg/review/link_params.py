"""A series' stored parameters (``series.params``) as sorted pairs, read at the scale of a
sweep's links.

A 10,000-node sweep stores 450,000 link series whose parameters differ only in their two
node names. Parsing each text whole, or letting SQLite's JSON functions take the names out
(five calls a row, no parse cache before SQLite 3.45), costs seconds on every read of the
store. Here the node names are cut out of the text by a regular expression, and the rest,
shared by every link of a sweep, is parsed once and checked against the text it came from:
any text the cut does not give back exactly (escapes, nesting, other layouts) is parsed
whole, so the pairs are always those of ``json.loads``.
"""

from __future__ import annotations

import json
import re

#: A node name as ``json.dumps(..., sort_keys=True)`` writes it: a string without escapes
#: (every name a sweep writes).
_NODE_PAIR = re.compile(r'"(node_[ab])": "([^"\\]*)"')

Pairs = tuple[tuple[str, object], ...]


class ParamsReader:
    """Stored parameter texts -> their pairs, sorted by name; one per read of the store
    (it keeps each distinct rest of a link's parameters)."""

    def __init__(self) -> None:
        #: (texts around the node names, the names cut) -> (the pairs, the node names' places
        #: in them, the pairs without the node names); None: that rest is parsed whole.
        self._rests: dict[tuple[str, ...],
                          tuple[Pairs, tuple[int, ...], Pairs] | None] = {}
        self._whole: dict[str, Pairs] = {}

    def pairs(self, params: str) -> Pairs:
        """The pairs of ``params``, sorted by name (those of ``json.loads``)."""
        cut = self._cut(params)
        if cut is None:
            return self._parsed(params)
        (pairs, places, _), _, values = cut
        out = list(pairs)
        for at, value in zip(places, values):
            out[at] = (out[at][0], value)
        return tuple(out)

    def link(self, params: str) -> tuple[Pairs, str, str] | None:
        """A link's parameters but its node names, and its ``node_a`` and ``node_b``; None
        for a series without both (or with either ``null``)."""
        cut = self._cut(params)
        if cut is not None:
            (_, places, rest), names, values = cut
            if len(places) == 2:
                return (rest, values[0], values[1]) if names[0] == "node_a" else (
                    rest, values[1], values[0])
        whole = dict(self._parsed(params))
        a, b = whole.pop("node_a", None), whole.pop("node_b", None)
        if a is None or b is None:
            return None
        return tuple(sorted(whole.items())), _name(a), _name(b)

    def _parsed(self, params: str) -> Pairs:
        pairs = self._whole.get(params)
        if pairs is None:
            pairs = tuple(sorted(json.loads(params).items()))
            if len(self._whole) < 100000:  # texts without node names: a handful
                self._whole[params] = pairs
        return pairs

    def _cut(self, params: str) -> tuple[tuple[Pairs, tuple[int, ...], Pairs],
                                         tuple[str, ...], list[str]] | None:
        """The rest's parsed form, and the names and values of the nodes cut out of
        ``params``; None where the text must be parsed whole."""
        parts = _NODE_PAIR.split(params)
        if len(parts) == 1:
            return None
        names, values = tuple(parts[1::3]), parts[2::3]
        key = (*parts[0::3], *names)  # the rest's texts and the names cut: what it is
        try:
            parsed = self._rests[key]
        except KeyError:
            texts = parts[0::3]
            rest = texts[0] + "".join(f'"{n}": null{t}' for n, t in zip(names, texts[1:]))
            parsed = self._rests[key] = _rest(rest, names, values, params)
        return None if parsed is None else (parsed, names, values)


def _name(value: object) -> str:
    """A node name that is not a plain string, as SQLite's ``json_extract`` gives it (which
    ``fabreg isolate`` used before)."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _rest(rest: str, names: tuple[str, ...], values: list[str], params: str
          ) -> tuple[Pairs, tuple[int, ...], Pairs] | None:
    """The pairs of ``rest`` (each cut name's value None) and the places of the cut names in
    them, if putting ``values`` back gives ``params`` exactly as the store writes it (then
    every text of this rest and these names reads the same way); else None."""
    if len(set(names)) != len(names) or "\\" in params:
        return None
    try:
        whole = json.loads(rest)
    except ValueError:
        return None
    if not isinstance(whole, dict) or any(whole.get(n, 0) is not None for n in names):
        return None
    if json.dumps({**whole, **dict(zip(names, values))}, sort_keys=True) != params:
        return None
    pairs = tuple(sorted(whole.items()))
    keys = [k for k, _ in pairs]
    places = tuple(keys.index(n) for n in names)
    others = tuple(p for p in pairs if p[0] not in names)
    return pairs, places, others
