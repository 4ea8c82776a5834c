"""Re-annotate the published claims from the claims registry and rewrite each report's claims table.

After an edit of the registry's text fields (a quote, a source, a size note, a label), the published claim
files and the tables at the top of the reports are brought up to date without rerunning a notebook: values,
verdicts and provenance stay those of the run. A claim the registry no longer matches is an error (rerun
that notebook instead). Wall-clock claims timed while another notebook ran are labelled
(`reporting.contention`). The index is rebuilt at the end.

    python scripts/refresh_claims.py [--reports-dir reports]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specdec_lib.reporting.contention import label_wall_clock
from specdec_lib.reporting.html import refresh_claims_summary
from specdec_lib.reporting.index import build_index, load_status
from specdec_lib.reporting.results import atomic_write_text
from specdec_lib.verdicts.registry import annotate


def refresh(reports_dir: Path) -> list[str]:
    """Refresh every notebook with a claims file and a report in ``reports_dir``; returns their names."""
    if not (reports_dir / "claims").is_dir():
        raise ValueError(f"--reports-dir {reports_dir} has no claims/ folder")
    status = load_status(reports_dir)
    done = []
    for claims_file in sorted((reports_dir / "claims").glob("*.json")):
        name = claims_file.stem
        report = reports_dir / f"{name}.html"
        if not report.exists():
            continue
        text = claims_file.read_text(encoding="utf-8")
        payload = json.loads(text)
        claims = label_wall_clock(annotate(payload["claims"], name), name, status)
        ending = "\n" if text.endswith("\n") else ""   # the file's own ending, as the runner wrote it
        atomic_write_text(claims_file, json.dumps({**payload, "claims": claims}, indent=1) + ending)
        refresh_claims_summary(report, name, claims, status.get(name))
        done.append(name)
    build_index(reports_dir)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports-dir", type=Path, default=Path("reports"))
    args = parser.parse_args()
    print("refreshed:", ", ".join(refresh(args.reports_dir)) or "nothing")


if __name__ == "__main__":
    main()
