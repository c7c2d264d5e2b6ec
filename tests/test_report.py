"""The report: Markdown + self-contained HTML that opens with no network."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from fabreg.review.synthetic import generate

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "data", "action", "poster", "srcset") and value:
                self.refs.append((tag, name, value))


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    generate(root / "perflogs", sessions=40, shifted=0.1, seed=31, transports=("shm", "tcp"),
             nodes=(1, 2))
    db = root / "fabreg.db"
    from conftest import fabreg

    fabreg("ingest", "-q", str(root / "perflogs"), db=db, check=True)
    proc = fabreg("report", "--out", str(root / "out"), "--curve-threshold", "0", db=db,
                  check=True)
    assert "wrote" in proc.stdout
    return root / "out"


def test_html_is_self_contained(report_dir: Path):
    page = (report_dir / "index.html").read_text()
    parser = _Refs()
    parser.feed(page)
    assert "script" not in parser.tags and "link" not in parser.tags
    assert parser.refs, "no images at all"
    for tag, attr, value in parser.refs:
        assert value.startswith("data:image/png;base64,"), (tag, attr, value[:80])
    assert not re.search(r"https?://|//cdn|@import|url\(", page)


def test_markdown_and_plots_cover_moved_series_and_size_curves(report_dir: Path):
    md = (report_dir / "summary.md").read_text()
    assert md.startswith("# fabreg trend report")
    assert "| regression |" in md or "| improvement |" in md
    assert "## benchmark osu_" in md and "/ mpi " in md and "/ transport " in md
    assert "## Size curves: latest~1 vs latest" in md
    assert "latency vs size" in md and "bandwidth vs size" in md
    for name in re.findall(r"\(plots/([\w.-]+)\)", md):
        assert (report_dir / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install "
                                             "chromium) for the no-network rendering test")
def test_page_renders_in_a_browser_with_the_network_cut(report_dir: Path, tmp_path: Path):
    import matplotlib.image

    shot = tmp_path / "shot.png"
    proc = subprocess.run([
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1100,1400",
        f"--screenshot={shot}", (report_dir / "index.html").as_uri()],
        capture_output=True, text=True, timeout=180)
    assert shot.exists(), proc.stderr[-2000:]
    pixels = matplotlib.image.imread(str(shot))
    colours = np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50  # plots rendered, not a blank or broken-image page
