"""report.html in a real browser: headless Chromium loads every embedded figure and paints the page.

CI installs Chromium from Debian's packages (.ci/run); elsewhere the test skips without it.
"""

import os
import shutil
import subprocess

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
