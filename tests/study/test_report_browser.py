"""report.html in a real browser: headless Chromium loads every embedded figure and paints the page.

CI installs Chromium from Debian's packages (.ci/run); elsewhere the test skips without it.
"""

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                                reason="Chromium not installed: `apt-get install chromium` (or put it on PATH) to run the browser tests")


def chromium(tmp_path, *args):
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_every_figure_loads(tiny_study, tmp_path):
    _, report = tiny_study
    n_img = report.html.read_text().count("<img ")
    assert n_img >= 3
    dom = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", report.html.as_uri()).stdout
    assert f'data-figures="ok:{n_img}"' in dom


def test_screenshot_is_not_blank(tiny_study, tmp_path):
    _, report = tiny_study
    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,2400", report.html.as_uri())
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.std() > 10  # text, tables and figures, not a blank page
    assert (pixels < 128).mean() > 0.005


ARTEFACTS = Path(os.environ.get("MECHEVAL_TEST_ARTEFACTS", Path(__file__).parents[2] / "test-artefacts"))


@pytest.mark.parametrize("study", ["tiny_study", "tiny_heldout_study"])
def test_layout_at_1280_by_800(study, request, tmp_path):
    """No horizontal scroll, every image decodes, the summary starts above the fold; the screenshot is kept
    under test-artefacts/ (MECHEVAL_TEST_ARTEFACTS) for review."""
    out, report = request.getfixturevalue(study)
    dom = chromium(tmp_path, "--window-size=1280,800", "--virtual-time-budget=5000", "--dump-dom",
                   report.html.as_uri()).stdout
    layout = json.loads(html.unescape(re.search(r'data-layout="([^"]*)"', dom).group(1)))
    assert layout["scrollWidth"] <= layout["innerWidth"], layout
    assert 0 <= layout["summaryTop"] < layout["innerHeight"] / 2, layout
    assert re.search(r'data-figures="ok:\d+"', dom)
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / f"report-{out.name}.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,800", report.html.as_uri())
    assert Image.open(shot).size == (1280, 800)
