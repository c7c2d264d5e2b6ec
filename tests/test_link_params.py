"""The stored parameters of a series read by cutting out its node names: always the pairs
``json.loads`` gives, and the links SQLite's JSON functions find."""

from __future__ import annotations

import json
import random
import sqlite3

from fabreg.review.link_params import ParamsReader

ODD_VALUES = ["n1", "", "a\"b", "back\\slash", "é", "\\", "\"node_a\": \"x\"", "null",
              "nid0001", "node_a", " "]


def _texts(rng: random.Random, count: int) -> list[str]:
    """Parameter texts as the store writes them, and some it might meet in an older or a
    site's store (other separators, unsorted, nested, null and non-string values)."""
    out = []
    for i in range(count):
        params: dict[str, object] = {"pattern": rng.choice(["xor", "ring"]),
                                     "round": str(rng.randrange(14))}
        for name in ("node_a", "node_b"):
            draw = rng.random()
            if draw < 0.6:
                params[name] = f"nid{rng.randrange(10000):05d}"
            elif draw < 0.75:
                params[name] = rng.choice(ODD_VALUES)
            elif draw < 0.8:
                params[name] = None
            elif draw < 0.85:
                params[name] = rng.randrange(5)
            elif draw < 0.9:
                params[name] = {"node_a": "inner", "node_b": "inner"}
        if rng.random() < 0.1:
            params['x"node_a'] = "weird"
        if rng.random() < 0.1:
            params["node_a_rail"] = rng.choice(ODD_VALUES)
        style = i % 10
        if style < 7:
            text = json.dumps(params, sort_keys=True)
        elif style < 8:
            text = json.dumps(params)
        elif style < 9:
            text = json.dumps(params, sort_keys=True, separators=(",", ":"))
        else:
            text = json.dumps(params, sort_keys=True, ensure_ascii=False)
        out.append(text)
    return out


def test_pairs_are_those_json_gives_for_every_text() -> None:
    texts = _texts(random.Random(7), 4000)
    reader = ParamsReader()
    for text in texts + texts:  # the second time from what the reader kept
        assert reader.pairs(text) == tuple(sorted(json.loads(text).items())), text


def test_links_are_those_sqlite_json_functions_find() -> None:
    """``link`` against what ``fabreg isolate`` read before: SQLite's ``json_extract``
    (both names not null) and ``json_remove``."""
    texts = _texts(random.Random(11), 4000)
    conn = sqlite3.connect(":memory:")
    reader = ParamsReader()
    found = 0
    for text in texts:
        a, b, rest = conn.execute(
            "SELECT json_extract(?1, '$.node_a'), json_extract(?1, '$.node_b'), "
            "json_remove(?1, '$.node_a', '$.node_b')", (text,)).fetchone()
        link = reader.link(text)
        if a is None or b is None:
            assert link is None, text
            continue
        found += isinstance(a, str) and isinstance(b, str)  # names, as a sweep writes them
        assert link == (tuple(sorted(json.loads(rest).items())), str(a), str(b)), text
    assert found > 1500


def test_a_sweep_s_links_share_one_parsed_rest() -> None:
    reader = ParamsReader()
    links = [reader.link(json.dumps({"node_a": f"n{i}", "node_b": f"n{i + 1}",
                                     "round": "3"}, sort_keys=True)) for i in range(100)]
    assert len({id(link[0]) for link in links if link}) == 1
    assert links[5] == ((("round", "3"),), "n5", "n6")
