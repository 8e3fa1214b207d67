"""The README's and docs' tables of committed results are what `make pages` produces from results/ now."""

import contextlib
import io
from pathlib import Path

import pandas as pd
import pytest

from pages.__main__ import main
from pages.base import PageError
from pages.blocks import generate, stale_pages
from pages.published_blocks import FIGURE_DATA

ROOT = Path(__file__).resolve().parents[2]
STUDY = "results/cpu/quick"


def test_committed_pages_match_the_results():
    stale = stale_pages(ROOT)
    assert stale == [], f"pages differ from results/: {stale}; run `make pages` and commit the result"


def test_the_study_figure_keeps_each_atr_grammar_apart():
    """Based ran on ATR easy and on the large vocabulary at d = 64: two rows, each beside its grammar's median."""
    data = pd.read_csv(ROOT / FIGURE_DATA)
    value = data[(data["task"] == "atr") & (data["scale"] == "paper-d64") & (data["quantity"] == "@value")
                 & (data["source"] == "published")]
    published = value.set_index("arch")["value"]
    assert published["based"] == 0.93 and published["based · large_vocab"] == 0.95


def make_pages(*args) -> tuple[int, str]:
    """`make pages`' command (`python -m pages`) on `args`: its exit status and what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        status = main([str(a) for a in args])
    return status, printed.getvalue()


def _tree(tmp_path: Path, block: str) -> Path:
    """A repository with one committed study (linked) and one page holding `block`."""
    (tmp_path / "results" / "cpu").mkdir(parents=True)
    (tmp_path / "results" / "cpu" / "quick").symlink_to(ROOT / STUDY)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(f"# A page\n\nprose\n\n<!-- generated: {block} -->\n<!-- end generated -->\n")
    return tmp_path


def test_a_changed_number_makes_the_page_stale(tmp_path):
    root = _tree(tmp_path, f"studies study={STUDY}")
    for path, text in generate(root).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    page = root / "docs" / "page.md"
    text = page.read_text()
    assert "prose" in text and "| attention |" in text and "induction" in text
    assert stale_pages(root) == []
    page.write_text(text.replace("| 3,000 |", "| 3,001 |", 1))  # one hand-edited number
    assert stale_pages(root) == [Path("docs/page.md")]
    (root / FIGURE_DATA).write_text("task,scale\n")
    assert stale_pages(root) == [Path("docs/page.md"), FIGURE_DATA]


def test_an_unknown_block_is_one_line_naming_the_page(tmp_path):
    root = _tree(tmp_path, "nonsense")
    before = (root / "docs" / "page.md").read_text()
    with pytest.raises(PageError, match="docs/page.md: unknown generated block 'nonsense'"):
        generate(root)
    status, printed = make_pages(root, "--check")
    assert status == 2 and "error: docs/page.md: unknown generated block 'nonsense'" in printed
    assert (root / "docs" / "page.md").read_text() == before  # nothing written


def test_a_block_matching_no_study_is_an_error(tmp_path):
    root = _tree(tmp_path, "studies task=mqar")
    with pytest.raises(PageError, match="no study under results/ matches"):
        generate(root)


def test_rounding_and_cost_blocks_read_the_study_and_name_a_missing_one(tmp_path):
    root = _tree(tmp_path, "rounding studies=cpu/quick seed=1")
    text = generate(root)[Path("docs/page.md")]
    # seed 1 of the committed quick study: attention retrieves at the query there, Mamba's findings hold
    assert "| `results/cpu/quick` | not reproduced | reproduced | reproduced | reproduced | L1 key+" in text
    (root / "docs" / "page.md").write_text("<!-- generated: rounding studies=cpu/quick,cpu/nowhere -->\n<!-- end generated -->\n")
    with pytest.raises(PageError, match=r"docs/page.md: generated block 'rounding studies=cpu/quick,cpu/nowhere'"):
        generate(root)
    (root / "docs" / "page.md").write_text("<!-- generated: costs by=arch -->\n<!-- end generated -->\n")
    costs = generate(root)[Path("docs/page.md")]
    assert "| cpu/quick | attention | 3 | 3,000 |" in costs  # three seeds of 3,000 steps
    running = root / "results" / "cpu" / "running" / "runs" / "r0"  # a study still training its first run
    running.mkdir(parents=True)
    (running / "config.yaml").write_text((ROOT / STUDY / "runs" / sorted(p.name for p in (ROOT / STUDY / "runs").iterdir())[0] / "config.yaml").read_text())
    (root / "docs" / "page.md").write_text("<!-- generated: costs -->\n<!-- end generated -->\n")
    assert "running" not in generate(root)[Path("docs/page.md")]  # costed once it has a finished run; no error now


def test_a_study_names_the_command_that_made_it_and_the_runs_it_did_not(tmp_path):
    import json

    import yaml

    from pages.study_blocks import made_by
    from mecheval.study import STUDIES
    from mecheval.study.command import study_command
    from mecheval.sweeps.spec import SweepConfig, run_overrides

    spec = STUDIES["quick"].sweep("cpu", archs=["attention"], seeds=[0])
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "study.json").write_text(json.dumps({"preset": "quick", "scale": "cpu", "archs": ["attention"]}))
    (name, _), = run_overrides(SweepConfig.model_validate(spec))
    (tmp_path / "runs" / name).mkdir(parents=True)
    command = study_command(tmp_path, out="results/x")
    assert made_by(tmp_path, command) == f"Made by `{command}`."
    (tmp_path / "runs" / "by-hand").mkdir()  # a run an earlier call made
    assert made_by(tmp_path, command).startswith(f"`{command}` makes 1 of its 2 runs; earlier calls made the others")


def test_the_findings_table_is_one_row_per_finding_with_accuracy_and_mechanism_apart(tmp_path):
    """The README's table: one line per finding (no stacked `<br>` lines), one outcome, its parts apart, and a
    sentence counting the outcomes; on the 4-pair quick study attention's seeds 1-2 are positional pointers, so
    its mechanism fails while its accuracy holds."""
    root = _tree(tmp_path, "findings scale=cpu")
    page = root / "docs" / "page.md"
    page.write_text(page.read_text() + "\n<!-- generated: pooled name=q scale=cpu -->\n<!-- end generated -->\n")
    block = generate(root)[Path("docs/page.md")].split("<!-- generated: findings scale=cpu -->")[1].split("<!-- end generated -->")[0]
    assert "<br>" not in block
    rows = [line.split(" | ") for line in block.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    assert [r[0] for r in rows] == ["| 1", "| 2", "| 3", "| 4"]  # the quick study's four findings
    attention = next(r for r in rows if r[1].startswith("Attention"))
    assert attention[2:5] == ["**not reproduced**", "reproduced", "not reproduced"]
    assert attention[8] == "mechanism not reproduced"
    statuses = [r[2].strip("*") for r in rows]
    assert (f"Of the 4 published findings our `cpu` runs check, {statuses.count('reproduced')} reproduce, "
            f"{statuses.count('not reproduced')} do not") in block


def test_checks_are_one_line_each_and_kept_to_their_scale(tmp_path):
    root = _tree(tmp_path, "checks scale=cpu")
    block = generate(root)[Path("docs/page.md")]
    assert "<br>" not in block and block.count("| cpu |") == 4  # one line per finding the study checks
    assert "| cpu |" not in generate(_tree(tmp_path / "b", "checks scale=paper-d*")).get(Path("docs/page.md"), "")
    assert "| cpu |" not in generate(_tree(tmp_path / "c", "checks scale=cpu name=quick-main*")).get(Path("docs/page.md"), "")
    assert generate(_tree(tmp_path / "d", "checks scale=cpu name=qu*"))[Path("docs/page.md")].count("| cpu |") == 4


def test_the_design_block_reads_each_trial_sweep_names_what_differs_from_the_main_job_and_refuses_a_mixed_one(tmp_path):
    trials = ROOT / "results" / "cpu" / "quick-design"
    (tmp_path / "results" / "t" / "a" / "runs").mkdir(parents=True)
    for run in sorted((trials / "attention-lr1e-3" / "runs").iterdir()):
        (tmp_path / "results" / "t" / "a" / "runs" / run.name).symlink_to(run)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("<!-- generated: design dir=results/t -->\n<!-- end generated -->\n")
    text = generate(tmp_path)[Path("docs/page.md")]
    assert "| `results/t/a` | attention | 0.001 | 128 | 3,000 | 0: 1.00, 1: 0.09, 2: 0.13, 3: 1.00, 4: 0.11, 5: 0.11 | 2 of 6 |" in text
    (tmp_path / "results" / "m").mkdir()
    (tmp_path / "results" / "m" / "runs").symlink_to(ROOT / "results" / "cpu" / "quick-main" / "runs")
    (tmp_path / "docs" / "page.md").write_text("<!-- generated: design dir=results/t main=results/m -->\n<!-- end generated -->\n")
    text = generate(tmp_path)[Path("docs/page.md")]  # the main job's attention at 3e-3: only the rate differs
    assert "| 3,000 | optim.lr 0.003 → 0.001 | 0: 1.00," in text
    other = next((trials / "attention-5000-steps" / "runs").iterdir())  # another design in the same sweep
    (tmp_path / "results" / "t" / "a" / "runs" / other.name).symlink_to(other)
    with pytest.raises(PageError, match="results/t/a mixes 2 designs"):
        generate(tmp_path)


def test_a_block_selects_several_studies_by_their_directories(tmp_path):
    """`study=A,B` chooses exactly those studies (training sweeps without a preset among them); none: one clear line."""
    from pages.base import chosen_studies

    root = _tree(tmp_path, f"studies study={STUDY}")
    (root / "results" / "cpu" / "other" / "runs").mkdir(parents=True)
    (root / "results" / "cpu" / "third" / "runs").mkdir(parents=True)
    page = Path("docs/page.md")
    assert chosen_studies(root, "modern", {"study": f"{STUDY},results/cpu/other"}, page) == [Path("results/cpu/other"), Path(STUDY)]
    with pytest.raises(PageError, match="no study under results/ matches"):
        chosen_studies(root, "modern", {"study": "results/cpu/absent"}, page)


@pytest.mark.parametrize("field, ours, other", [("draw", "mecheval", "published,published-sets"), ("build", "default", "study")])
def test_a_block_chooses_studies_by_their_design(tmp_path, field, ours, other):
    """`draw=`: a study without the field trained on our draw (`mecheval`); `build=`: a study of our build (attention,
    cpu scale) is `default`: asking for the other design leaves it out."""
    from pages.base import chosen_studies

    root = _tree(tmp_path, f"studies study={STUDY}")
    page = Path("docs/page.md")
    assert chosen_studies(root, "pooled", {"task": "ar", field: ours}, page) == [Path(STUDY)]
    with pytest.raises(PageError, match="no study under results/ matches"):
        chosen_studies(root, "pooled", {"task": "ar", field: other}, page)
