"""`python -m pages [ROOT] [--check]` (`make pages`): fill every generated block of README.md and docs/**/*.md
from results/ and draw the figures; with --check change nothing and exit 1 naming the pages that differ."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mecheval.errors import MechevalError
from pages.blocks import PageError, stale_pages, write_pages


def main(argv: list[str] | None = None) -> int:
    """0: done (with --check: nothing stale); 1: --check found stale pages; 2: an error, said in one line."""
    parser = argparse.ArgumentParser(prog="python -m pages", description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path("."),
                        help="the repository (README.md, docs/, results/)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming the pages that differ "
                        "from what results/ gives now")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"{args.root} is not a directory")
    try:
        changed = stale_pages(args.root) if args.check else write_pages(args.root)
    except (PageError, MechevalError, OSError) as e:  # a wrong page or result, a refused link, a full disk
        print(f"error: {e}", file=sys.stderr)
        return 2
    verb = "stale" if args.check else "written"
    for path in changed:
        print(f"{verb}: {path}")
    if args.check and changed:
        print("run `make pages` to regenerate them", file=sys.stderr)
        return 1
    if not changed:
        print("every page is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
