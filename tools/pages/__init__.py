"""This repository's pages of committed results: the generated blocks of README.md and docs/**/*.md, the study
figure and the pooled and rates figures, all from results/ (`make pages`, `python -m pages` with tools/ on the
path). Repository tooling, not part of the installed package: it knows this repository's README.md, docs/ and
results/SCALE/NAME."""
