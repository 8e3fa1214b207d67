"""`make pages` on results someone else made (issue 56): no write through a link or torn by a full disk,
one writer at a time, and no markup of the results' files in the pages."""

from __future__ import annotations

import errno
import json
import re
import shutil
from pathlib import Path

from mecheval.training.lock import DirLock
from pages.blocks import generate

from tests.report.test_pages import ROOT, STUDY, _tree, make_pages

EVIL = "<script>alert(1)</script> [click](javascript:alert(2)) <img src=x onerror=alert(3)> `x"


def test_markup_in_study_json_and_study_names_shows_as_text(tmp_path):
    root = _tree(tmp_path, "studies scale=cpu")
    evil = root / "results" / "cpu" / "q<b onmouseover=alert(4)>[x](javascript:alert(5))"
    shutil.copytree(ROOT / STUDY, evil, ignore=shutil.ignore_patterns("runs"))
    (evil / "runs").symlink_to(ROOT / STUDY / "runs")
    meta = json.loads((evil / "study.json").read_text())
    (evil / "study.json").write_text(json.dumps({**meta, "description": EVIL, "scale": "<i>cpu</i>"}))
    text = generate(root)[Path("docs/page.md")]
    outside_code = re.sub(r"`[^`]*`", "", text.replace("\\`", ""))  # a code span shows its text as it is
    for markup in ("<script", "<img", "<b ", "<i>"):
        assert markup not in outside_code, markup
    assert not re.search(r"(?<!\\)\]\(javascript:", outside_code)  # no link: its bracket is escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt; \\[click\\](javascript:alert(2))" in text
    assert "### q&lt;b onmouseover=alert(4)&gt;\\[x\\](javascript:alert(5)) (cpu)" in text
    assert '<a id="cpu-q-b-onmouseover-alert-4-x-javascript-alert-5-"></a>' in text


def test_a_symlinked_page_is_refused_and_its_target_untouched(tmp_path):
    root = _tree(tmp_path, f"studies study={STUDY}")
    outside = tmp_path / "outside.md"
    outside.write_text((root / "docs" / "page.md").read_text())
    before = outside.read_text()
    (root / "docs" / "page.md").unlink()
    (root / "docs" / "page.md").symlink_to(outside)
    status, printed = make_pages(root)
    assert status == 2 and f"{root / 'docs' / 'page.md'}: a symbolic link" in printed, printed
    assert outside.read_text() == before


def test_a_full_disk_leaves_the_old_page_whole(tmp_path, monkeypatch):
    root = _tree(tmp_path, f"studies study={STUDY}")
    page = root / "docs" / "page.md"
    before = page.read_text()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.fsync", full)
    status, printed = make_pages(root)
    assert status != 0 and "No space left on device" in printed, printed
    assert page.read_text() == before and not list(page.parent.glob(".page.md.tmp-*"))


def test_pages_takes_the_docs_lock(tmp_path):
    root = _tree(tmp_path, f"studies study={STUDY}")
    before = (root / "docs" / "page.md").read_text()
    with DirLock(root / "docs", "documentation"):
        status, printed = make_pages(root)
    assert status == 2 and "documentation in use by pid" in printed, printed
    assert (root / "docs" / "page.md").read_text() == before


def test_the_readme_at_the_repository_root_is_written_too(tmp_path):
    """The README lies in the root itself (not below it): written as docs/ pages are (the writer refused it)."""
    root = _tree(tmp_path, f"studies study={STUDY}")
    (root / "README.md").write_text(f"# R\n\n<!-- generated: studies study={STUDY} -->\n<!-- end generated -->\n")
    status, printed = make_pages(root)
    assert status == 0, printed
    assert "| attention |" in (root / "README.md").read_text()
