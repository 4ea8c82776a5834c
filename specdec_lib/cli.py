"""Command line: ``specdec reproduce`` (the notebooks -> reports), ``specdec index``, ``specdec seed-check``,
``specdec bench``.

Examples::

    python -m specdec_lib reproduce                       # every notebook, default profile -> reports/
    python -m specdec_lib reproduce --profile smoke       # toy models, seconds -> reports/smoke/
    python -m specdec_lib reproduce --notebook 04_block -p num_prompts 2 -p temperatures "[0.6, 1.0]"
                                                          # -> reports/custom/, data/results/custom/
    python -m specdec_lib index                           # rebuild reports/index.html from claims/*.json
    python -m specdec_lib seed-check -n 02_traversal --run-dir reports/custom --purpose "..."
                                                          # a run under -p seeds '[1]' -> data/results/seed_checks/
    python -m specdec_lib bench --help                    # timing benchmark (specdec_lib.experiments.benchmark)
                                                          # -> runs/bench/ (data/results/ with --publish)

``-p NAME VALUE`` overrides a name of the notebooks' ``parameters`` cell; an unknown name, ``profile``
(use ``--profile``) or a malformed value is an error before anything runs. Values of text parameters
(`TEXT_PARAMETERS`, or a string default) are taken as written; every other value must be a Python/JSON
literal (``3``, ``0.5``, ``[0.6, 1.0]``, ``None``, ``true``) of the default's type. A run with ``-p``
writes to ``reports/custom/`` and ``data/results/custom/`` and never replaces the published
``reports/`` and ``data/results/`` (nor does a smoke run) unless ``--publish`` is given.

Every argument is checked before anything runs (`reporting.destinations.check_run`): parameter values
(``num_threads`` >= 1, finite temperatures, non-empty lists, a known dtype, no real models on the smoke
profile), ``--timeout`` >= 1 and the folders (none inside ``reports/`` or ``data/results/`` but those
folders and their run folders, no file, no read-only folder). A bad argument is a one-line ``error:`` and
exit status 2. A notebook that fails leaves the published files as they were (its partial output goes to
the ``custom/`` run folder) and makes the exit status 1. ``seed-check`` records only a run of the published
profile, models and code, into ``data/results/seed_checks/`` or a folder outside the published tree;
``index`` never creates its folder nor writes one it cannot.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from .reporting import reproduce as reports
from .reporting import destinations
from .reporting.seed_checks import SEED_CHECKS_DIR, check_out_dir, record_seed_check


TEXT_PARAMETERS = frozenset({"target_model", "draft_model", "device", "dtype", "split"})
"""Notebook parameters whose values are text even though their default is None."""

_OPENERS, _CLOSERS = ("[", "{", "(", '"', "'"), ("]", "}", ")", '"', "'")
_NUMBERISH = re.compile(r"[+-]?[0-9._]*[0-9][0-9._eE+-]*")


def parse_value(text: str, strict: bool = False) -> Any:
    """A ``-p`` value: a Python/JSON literal when it parses (``3``, ``0.5``, ``[4, 8]``, ``None``,
    ``true``, ``{"a": 1}``), else the text itself. ValueError for text that only looks like a literal
    (brackets or quotes that do not close, a malformed number such as ``0.6.1``) and, with ``strict``,
    for any text that is not a literal."""
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    if strict or not stripped or stripped.startswith(_OPENERS) or stripped.endswith(_CLOSERS) \
            or _NUMBERISH.fullmatch(stripped):
        raise ValueError(f"{text!r} is not a valid value: expected a Python/JSON literal such as 3, 0.5, "
                         f"[0.6, 1.0], None or true")
    return text


def _fits(value: Any, default: Any) -> bool:
    """Whether ``value`` has the type the notebook's (non-None) default suggests."""
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def parse_parameters(pairs: Sequence[Sequence[str]], notebooks: Sequence[str],
                     notebook_dir: Path | str = reports.NOTEBOOK_DIR) -> dict[str, Any]:
    """The ``-p NAME VALUE`` pairs as papermill parameters, checked against the ``parameters`` cells of
    ``notebooks``. ValueError naming the parameter for ``profile`` (use ``--profile``), a name given twice,
    a name no notebook declares, a malformed value, or a value of another type than the default's."""
    raw: dict[str, str] = {}
    for name, text in pairs:
        if name == "profile":
            raise ValueError(f"-p profile {text}: the profile is not a notebook parameter; use --profile {text} "
                             f"(it also picks the models and the reports folder)")
        if name in raw:
            raise ValueError(f"-p {name} is given twice ({raw[name]!r} and {text!r})")
        raw[name] = text
    if not raw:
        return {}
    reports.check_parameters(notebooks, raw, notebook_dir)  # unknown names -> ValueError
    defaults: dict[str, list[Any]] = {}
    for nb in notebooks:
        for name, default in reports.notebook_parameters(nb, notebook_dir).items():
            if name in raw:
                defaults.setdefault(name, []).append(default)
    out: dict[str, Any] = {}
    for name, text in raw.items():
        known = [d for d in defaults[name] if d is not None and d is not reports.NOT_A_LITERAL]
        if name in TEXT_PARAMETERS or (known and all(isinstance(d, str) for d in known)):
            stripped = text.strip()
            if stripped.lower() in ("none", "null"):
                out[name] = None
            elif stripped[:1] in ("'", '"') and stripped[-1:] == stripped[:1]:
                out[name] = parse_value(stripped, strict=True)
            else:
                out[name] = text
            continue
        try:
            value = parse_value(text, strict=True)
        except ValueError as exc:
            raise ValueError(f"-p {name}: {exc}") from None
        if value is not None and known and not any(_fits(value, d) for d in known):
            raise ValueError(f"-p {name}: {value!r} ({type(value).__name__}) does not match the type of the "
                             f"notebook's default {known[0]!r} ({type(known[0]).__name__})")
        out[name] = value
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="Lossless speculative decoding workbook.")
    sub = parser.add_subparsers(dest="command", required=True)

    rep = sub.add_parser("reproduce", help="execute notebooks with papermill, render HTML reports and the index")
    rep.add_argument("--profile", default="default", choices=reports.PROFILES,
                     help="smoke: toy models, seconds; default: the offline pair in bfloat16 on CPU (~86 min one at a time, ~43 two at a time); "
                          "full: larger runs for a GPU")
    rep.add_argument("--notebook", "-n", action="append", default=None, metavar="NAME",
                     help="run only this notebook (e.g. 04_block; repeatable); default: all")
    rep.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="override a name of the notebooks' parameters cell (unknown names and 'profile' "
                          "are errors: use --profile); text parameters (models, device, dtype, split) take "
                          "the value as written, the others a Python/JSON literal, e.g. -p temperatures "
                          "'[0.6]'. A run with -p writes to reports/custom/ and data/results/custom/")
    rep.add_argument("--publish", action="store_true",
                     help="let a run with -p parameters, or a smoke run, write into the published reports/ "
                          "and data/results/ (replacing the reports made with the notebooks' own settings)")
    rep.add_argument("--reports-dir", type=Path, default=None,
                     help="where reports go (default: reports/, reports/smoke/ for the smoke profile, "
                          "their custom/ subfolder for a run with -p); no other folder inside reports/ or "
                          "data/results/")
    rep.add_argument("--results-dir", type=Path, default=None,
                     help="where result data go (default: data/results/, data/results/smoke/ for smoke, "
                          "their custom/ subfolder for a run with -p)")
    rep.add_argument("--notebook-dir", type=Path, default=reports.NOTEBOOK_DIR, help="folder of the notebooks")
    rep.add_argument("--timeout", type=int, default=None, help="per-cell execution timeout in seconds (>= 1)")
    rep.add_argument("--log-output", action="store_true", help="stream the notebooks' output to the terminal")
    rep.add_argument("--no-progress", action="store_true", help="no progress bars")
    rep.add_argument("--jobs", "-j", type=int, default=None,
                     help="notebooks run at a time, each in its own process (default: 2 for the default profile, "
                          "one thread each on this 2-core CPU; 1 otherwise; 1 gives the timings measured inside a "
                          "notebook the CPU to themselves)")
    rep.add_argument("--list", action="store_true", help="list the notebooks and exit")

    idx = sub.add_parser("index", help="rebuild index.html from the claim files of a reports folder")
    idx.add_argument("--reports-dir", type=Path, default=None, help="an existing reports folder (default: the "
                     "profile's, reports/ or reports/smoke/)")
    idx.add_argument("--profile", default="default", choices=reports.PROFILES)

    chk = sub.add_parser("seed-check", help="record a finished run under another data seed (-p seeds) in "
                         "data/results/seed_checks/, where the index sets it beside the published verdicts; "
                         "only a run of the published profile, models and code")
    chk.add_argument("--notebook", "-n", required=True, metavar="NAME")
    chk.add_argument("--run-dir", type=Path, required=True, help="the run's reports folder (e.g. reports/custom)")
    chk.add_argument("--purpose", required=True, help="what the run keeps of the notebook's design")
    chk.add_argument("--keep", action="append", default=None, metavar="TEXT",
                     help="record only the claims containing TEXT (repeatable; default: every claim)")
    chk.add_argument("--out-dir", type=Path, default=SEED_CHECKS_DIR, help="default: data/results/seed_checks/; "
                     "no other folder inside reports/ or data/results/")

    sub.add_parser("bench", help="timing benchmark of the decoders (specdec_lib.experiments.benchmark); every argument "
                   "after 'bench' goes to it", add_help=False)
    return parser


def _reproduce(args: argparse.Namespace) -> int:
    # every argument is checked before anything is written
    try:
        if args.list:
            for name in reports.list_notebooks(args.notebook_dir):
                print(name)
            return 0
        if args.jobs is not None and args.jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
        notebooks = reports.resolve_notebooks(args.notebook, args.notebook_dir)
        params = parse_parameters(args.parameter, notebooks, args.notebook_dir)
        reports_dir, results_dir = reports.check_run(args.profile, params, args.reports_dir, args.results_dir,
                                                     args.publish, args.timeout)
        options = reports.RunOptions(reports_dir=reports_dir, results_dir=results_dir, notebook_dir=args.notebook_dir,
                                     progress=not args.no_progress, log_output=args.log_output,
                                     execution_timeout=args.timeout, publish=args.publish, jobs=args.jobs)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        runs = reports.reproduce(notebooks, profile=args.profile, parameters=params, options=options)
    except KeyboardInterrupt:
        print("\ninterrupted: the notebooks still running were stopped and published nothing; the finished ones "
              f"are in {reports_dir} (see status.json)", file=sys.stderr)
        return 130
    failed = [r.notebook for r in runs if r.status != "ok"]
    print(f"index: {Path(reports_dir) / 'index.html'}")
    if failed:
        record = reports.failures_dir(args.profile, Path(reports_dir))
        print(f"failed: {', '.join(failed)} (partial output in {record / 'failed'}"
              + (f"; the published {reports_dir} keeps its last good reports, the failures are in "
                 f"{record / 'index.html'}" if record != Path(reports_dir) else "") + ")", file=sys.stderr)
        return 1
    return 0


def _index(args: argparse.Namespace) -> int:
    reports_dir = args.reports_dir or reports.default_reports_dir(args.profile)
    try:
        destinations.check_run_folder("--reports-dir", reports_dir, destinations.PUBLISHED_REPORTS_DIR)
        path = reports.build_index(reports_dir)  # an existing folder only: never created here
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _seed_check(args: argparse.Namespace) -> int:
    try:
        check_out_dir("--out-dir", args.out_dir)
        path = record_seed_check(args.run_dir, args.notebook, args.purpose, args.keep, args.out_dir)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _bench(argv: list[str]) -> int:
    """``specdec bench ARGS``: `specdec_lib.experiments.benchmark.main(ARGS)` (imported lazily: `reproduce` never needs it)."""
    import importlib

    try:
        benchmark = importlib.import_module("specdec_lib.experiments.benchmark")
    except ModuleNotFoundError as exc:
        if exc.name != "specdec_lib.experiments.benchmark":
            raise
        print("error: specdec_lib.experiments.benchmark is not available in this installation", file=sys.stderr)
        return 2
    if not callable(getattr(benchmark, "main", None)):
        print("error: specdec_lib.experiments.benchmark has no main(argv) entry point", file=sys.stderr)
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
        return _index(args)
    if args.command == "seed-check":
        return _seed_check(args)
    raise AssertionError(args.command)


__all__ = ["main", "parse_value", "parse_parameters", "TEXT_PARAMETERS"]
