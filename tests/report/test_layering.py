"""The report reads results; it never imports the study that produces them (no study <-> report cycle)."""

import subprocess
import sys


def test_report_imports_no_study_module():
    code = "import sys, mecheval.report; print(sorted(m for m in sys.modules if m.startswith('mecheval.study')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
