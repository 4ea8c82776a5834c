"""Command line: ``specdec reproduce`` (the notebooks -> reports), ``specdec index``, ``specdec bench``.

Examples::

    python -m specdec_lib reproduce                       # every notebook, default profile -> reports/
    python -m specdec_lib reproduce --profile smoke       # toy models, seconds -> reports/smoke/
    python -m specdec_lib reproduce --notebook 04_block -p num_prompts 2 -p temperatures "[0.6, 1.0]"
    python -m specdec_lib index                           # rebuild reports/index.html from claims/*.json
    python -m specdec_lib bench --help                    # timing benchmark (specdec_lib.benchmark)
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Any, Sequence

from . import reports


def parse_value(text: str) -> Any:
    """A ``-p`` value: a Python/JSON literal when it parses (``3``, ``0.5``, ``[4, 8]``, ``None``), else text."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="Lossless speculative decoding workbook.")
    sub = parser.add_subparsers(dest="command", required=True)

    rep = sub.add_parser("reproduce", help="execute notebooks with papermill, render HTML reports and the index")
    rep.add_argument("--profile", default="default", choices=reports.PROFILES,
                     help="smoke: toy models, seconds; default: the offline pair on CPU (~30 min); "
                          "full: larger runs for a GPU")
    rep.add_argument("--notebook", "-n", action="append", default=None, metavar="NAME",
                     help="run only this notebook (e.g. 04_block; repeatable); default: all")
    rep.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="extra papermill parameter (value parsed as a Python literal when possible)")
    rep.add_argument("--reports-dir", type=Path, default=None,
                     help="where reports go (default: reports/, or reports/smoke/ for the smoke profile)")
    rep.add_argument("--results-dir", type=Path, default=None,
                     help="where result data go (default: data/results/, or data/results/smoke/ for smoke)")
    rep.add_argument("--notebook-dir", type=Path, default=reports.NOTEBOOK_DIR, help="folder of the notebooks")
    rep.add_argument("--timeout", type=int, default=None, help="per-cell execution timeout in seconds")
    rep.add_argument("--log-output", action="store_true", help="stream the notebooks' output to the terminal")
    rep.add_argument("--no-progress", action="store_true", help="no progress bars")
    rep.add_argument("--list", action="store_true", help="list the notebooks and exit")

    idx = sub.add_parser("index", help="rebuild index.html from the claim files of a reports folder")
    idx.add_argument("--reports-dir", type=Path, default=None)
    idx.add_argument("--profile", default="default", choices=reports.PROFILES)

    sub.add_parser("bench", help="timing benchmark of the decoders (specdec_lib.benchmark); every argument "
                   "after 'bench' goes to it", add_help=False)
    return parser


def _reproduce(args: argparse.Namespace) -> int:
    if args.list:
        for name in reports.list_notebooks(args.notebook_dir):
            print(name)
        return 0
    try:
        notebooks = reports.resolve_notebooks(args.notebook, args.notebook_dir)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    params = {name: parse_value(value) for name, value in args.parameter}
    runs = reports.reproduce(notebooks, profile=args.profile, parameters=params, reports_dir=args.reports_dir,
                             results_dir=args.results_dir, notebook_dir=args.notebook_dir, progress=not args.no_progress,
                             log_output=args.log_output, execution_timeout=args.timeout)
    reports_dir = args.reports_dir or reports.default_reports_dir(args.profile)
    failed = [r.notebook for r in runs if r.status != "ok"]
    print(f"index: {Path(reports_dir) / 'index.html'}")
    if failed:
        print(f"failed: {', '.join(failed)} (partial output in {Path(reports_dir) / 'failed'})", file=sys.stderr)
        return 1
    return 0


def _bench(argv: list[str]) -> int:
    """``specdec bench ARGS``: `specdec_lib.benchmark.main(ARGS)` (imported lazily: `reproduce` never needs it)."""
    import importlib

    try:
        benchmark = importlib.import_module("specdec_lib.benchmark")
    except ModuleNotFoundError as exc:
        if exc.name != "specdec_lib.benchmark":
            raise
        print("error: specdec_lib.benchmark is not available in this installation", file=sys.stderr)
        return 2
    if not callable(getattr(benchmark, "main", None)):
        print("error: specdec_lib.benchmark has no main(argv) entry point", file=sys.stderr)
        return 2
    return int(benchmark.main(argv) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``specdec`` and ``python -m specdec_lib``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        return _bench(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "reproduce":
        return _reproduce(args)
    if args.command == "index":
        reports_dir = args.reports_dir or reports.default_reports_dir(args.profile)
        print(reports.build_index(reports_dir))
        return 0
    raise AssertionError(args.command)


__all__ = ["main", "parse_value"]
