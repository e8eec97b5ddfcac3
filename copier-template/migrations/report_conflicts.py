#!/usr/bin/env python3
"""List the merge conflicts `copier update` left in a service (a copier migration).

copier update re-applies the service's own changes on top of the new template
release; where both changed the same lines it writes conflict markers
(<<<<<<< before updating ... >>>>>>> after updating) or a .rej file, and its
own output does not say so. This runs after every update and says it plainly:
the files and lines to resolve, and what to run afterwards. It changes nothing
and always exits 0 (the update itself has happened).

Usage: report_conflicts.py [--project DIR]
"""

from __future__ import annotations

import argparse
import os
import sys

SKIP_DIRS = {".git", "vendor", "node_modules", ".venv"}
MARKER = "<<<<<<< "
MAX_BYTES = 4 << 20  # larger files are not sources a template renders


def conflicts(project: str) -> list[str]:
    found = []
    for root, dirs, files in os.walk(project):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, project)
            if name.endswith(".rej"):
                found.append(f"{rel} (rejected hunks)")
                continue
            try:
                if os.path.getsize(path) > MAX_BYTES:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for i, line in enumerate(f, 1):
                        if line.startswith(MARKER):
                            found.append(f"{rel}:{i}")
            except OSError:
                continue
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=".")
    args = parser.parse_args()
    found = conflicts(args.project)
    if not found:
        return 0
    out = sys.stderr
    print("", file=out)
    print(f"CONFLICTS: copier update could not merge {len(found)} change(s) of the new template with yours:", file=out)
    for f in found:
        print(f"  {f}", file=out)
    print("Resolve each (keep the right side of <<<<<<< before updating / >>>>>>> after updating,", file=out)
    print("delete the markers; apply or drop each .rej), then run:", file=out)
    print("  make tidy build test validate-rate-limits   # ratekit validate refuses a file left with markers", file=out)
    print("  git add -A && git commit", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
