"""The report: Markdown + self-contained HTML that opens with no network."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from fabreg.review import report
from fabreg.review.perflog import Run, Sample
from fabreg.review.store import Store

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


#: Series whose newest value a check judged itself (its ``verdicts`` column): the report
#: lists them in its summary although their trend is stable.
FLAGGED = {"flaky": "FlakyCheck", "inconclusive": "BusyHostCheck"}


def add_flagged_series(db: Path) -> None:
    with Store(db) as store:
        for verdict, test in FLAGGED.items():
            samples = []
            for i in range(8):
                said = verdict if i == 7 else "ok"
                run = Run(1.7e9 + i * 86400.0, test, {"transport": "tcp"}, "bench", "p0",
                          "openmpi", jobid=f"{test}-{i}",
                          attrs={"verdicts": json.dumps({"latency_8B": said})})
                samples.append(Sample(run, "latency_8B", 5.0 + 0.01 * (i % 3), "us"))
            store.add(samples)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    from conftest import fabreg, synthetic_store

    db = synthetic_store(root, sessions=40, shifted=0.1, seed=31, transports=("shm", "tcp"),
                         nodes=(1, 2))
    add_flagged_series(db)
    proc = fabreg("report", "--out", str(root / "out"), "--curve-threshold", "0", db=db,
                  check=True)
    assert "wrote" in proc.stdout
    trends_out = fabreg("trends", "-q", db=db)
    (root / "out" / "trends.txt").write_text(trends_out.stdout)
    return root / "out"


def test_html_is_self_contained(report_dir: Path):
    page = (report_dir / "index.html").read_text()
    parser = _Refs()
    parser.feed(page)
    assert "script" not in parser.tags and "link" not in parser.tags
    assert parser.refs, "no images at all"
    for tag, attr, value in parser.refs:
        if tag == "a" and attr == "href":  # links within the page only
            assert re.fullmatch(r"#series-\d+", value), value
            assert f'id="{value[1:]}"' in page
            continue
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


def test_verdicts_come_first_and_match_trends(report_dir: Path):
    md = (report_dir / "summary.md").read_text()
    trends_out = (report_dir / "trends.txt").read_text()
    opened = int(re.search(r"(\d+) open regression\(s\)", trends_out).group(1))
    suspects = int(re.search(r"(\d+) suspect\(s\)", trends_out).group(1))
    assert opened > 0
    # The verdict summary is the first section, before the changes and the plots.
    assert md.index("## Verdicts") < md.index("## Changes") < md.index("## benchmark")
    assert f"| open regressions | {opened} |" in md
    assert re.search(rf"^\| suspects [^|]* \| {suspects} \|$", md, re.M)
    assert re.search(r"^\| flaky newest value [^|]* \| 1 \|$", md, re.M)
    assert re.search(r"^\| inconclusive newest value [^|]* \| 1 \|$", md, re.M)
    listed = md.split("### Open regressions", 1)[1].split("\n\n", 2)[1]
    assert len([line for line in listed.splitlines() if line.startswith("- ")]) == opened
    for heading, test in (("### Flaky (newest value)", FLAGGED["flaky"]),
                          ("### Inconclusive (newest value)", FLAGGED["inconclusive"])):
        section = md.split(heading, 1)[1].split("\n\n", 2)[1]
        assert section.startswith(f"- {test} transport=tcp bench:p0+openmpi latency_8B")
        assert "(plots/series-" in section  # a flagged series gets its plot too
    # The changes table says which regressions are still open: as many as trends counts.
    rows = [line for line in md.splitlines() if line.startswith("| regression |")]
    assert sum(line.startswith("| regression | open |") for line in rows) == opened
    closed = [line for line in rows if not line.startswith("| regression | open |")]
    assert all(re.match(r"\| regression \| no: (improvement|regression) [+-]", line)
               for line in closed), closed


def test_report_onto_an_existing_file_is_a_one_line_error(report_dir: Path, tmp_path: Path,
                                                          run_fabreg):
    db = report_dir.parent / "fabreg.db"
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    for out, words in ((blocker, "a file is in the way"),
                       (tmp_path / "no" / "such" / "report", "no directory")):
        proc = run_fabreg("report", "-q", "--out", str(out), db=db)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("fabreg: error: --out")
        assert words in proc.stderr and "Traceback" not in proc.stderr
    assert blocker.read_text() == "not a directory"
    assert not (tmp_path / "no").exists()


def png_dpi(png: bytes) -> float:
    """Pixels per inch from a PNG's pHYs chunk (matplotlib writes it)."""
    pos = 8
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"pHYs":
            per_metre, _, unit = struct.unpack(">IIB", png[pos + 8:pos + 17])
            assert unit == 1
            return per_metre * 0.0254
        pos += 12 + length
    raise AssertionError("no pHYs chunk")


def test_images_are_shown_at_a_size_where_text_is_at_least_10_px(report_dir: Path):
    page = (report_dir / "index.html").read_text()
    images = re.findall(r'<img [^>]*width="(\d+)" height="(\d+)" src="data:image/png;base64,'
                        r'([^"]+)"', page)
    assert images and len(images) == page.count("<img ")
    column = int(re.search(r"max-width:(\d+)px", page).group(1))
    for width, height, data in images:
        png = base64.b64decode(data)
        assert zlib.crc32(png[12:29]) == struct.unpack(">I", png[29:33])[0]  # a real IHDR
        shown_w, shown_h = int(width), int(height)
        assert (shown_w, shown_h) == report.png_size(png)
        assert shown_w <= column  # never scaled down by the page's column
        scale = shown_w / report.png_size(png)[0]
        smallest_px = report.MIN_FONT_PT * png_dpi(png) / 72 * scale
        assert smallest_px >= 10, smallest_px


RUN_COLOUR = np.array([0x40, 0x60, 0xA0])  # the run markers' colour in every series plot


def _matches(rgb: np.ndarray) -> np.ndarray:
    return (np.abs(rgb[..., :3].astype(int) - RUN_COLOUR) <= 3).all(axis=-1)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install "
                                             "chromium) for the no-network rendering test")
def test_page_renders_in_a_browser_with_the_network_cut(report_dir: Path):
    """Headless Chromium, every network path cut, draws the summary and the plots at their
    own size (1 image pixel = 1 screen pixel at 100 % zoom)."""
    import matplotlib.image

    shot = report_dir.parent / "screenshot.png"
    width, height = 1280, 3200
    proc = subprocess.run([
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
        "--force-device-scale-factor=1", "--hide-scrollbars",
        f"--user-data-dir={report_dir.parent / 'profile'}", f"--window-size={width},{height}",
        f"--screenshot={shot}", (report_dir / "index.html").as_uri()],
        capture_output=True, text=True, timeout=180)
    assert shot.exists(), proc.stderr[-2000:]
    pixels = (matplotlib.image.imread(str(shot))[..., :3] * 255).round().astype(np.uint8)
    assert pixels.shape[:2] == (height, width)
    ink = (pixels < 200).any(axis=-1)  # text and lines, not background
    # The verdict summary at the top is rendered text, not a blank or an error page.
    assert ink[:400].mean() > 0.005
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) > 50  # plots rendered, not a blank or broken-image page
    # The first plot: its run markers appear, spread over the same width as in the PNG itself.
    page = (report_dir / "index.html").read_text()
    first = base64.b64decode(re.search(r'src="data:image/png;base64,([^"]+)"', page).group(1))
    png = (matplotlib.image.imread(io.BytesIO(first), format="png")[..., :3] * 255).round()
    in_png = np.nonzero(_matches(png))
    rows = np.nonzero(_matches(pixels).any(axis=1))[0]
    assert len(in_png[0]) and len(rows), "no run markers on screen"
    top = rows[0] - in_png[0].min()  # where the image starts on screen
    drawn = np.nonzero(_matches(pixels[top:top + png.shape[0]]))
    assert abs((drawn[1].max() - drawn[1].min()) - (in_png[1].max() - in_png[1].min())) <= 2
    assert abs((drawn[0].max() - drawn[0].min()) - (in_png[0].max() - in_png[0].min())) <= 2


def test_still_open_says_which_change_the_verdict_comes_from():
    """A suspect after a regression leaves the regression open; a suspect says how many of
    the runs it needs confirm its level (docs/trends.md, confirmation rule)."""
    from fabreg.review import trends

    x = np.concatenate([10.0 * np.exp(np.random.default_rng(4).normal(0, 0.02, 60)),
                        12.0 * np.exp(np.random.default_rng(5).normal(0, 0.02, 30)),
                        [18.0, 18.3]])
    verdict, changes, _ = trends.detect_values(x, lower_better=True)
    v = trends.SeriesVerdict(None, verdict, changes)  # type: ignore[arg-type]
    regression, suspect = changes
    assert report.still_open(v, regression).startswith("open; then a suspect +")
    assert report.still_open(v, suspect) == "suspect: 2 of 3 runs confirm the new level"
