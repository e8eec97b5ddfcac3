#!/usr/bin/env python3
"""Rewrite the imports of ratekit packages that moved (a copier migration).

ratekit's control plane, pages and observability left core/ for rooms of
their own (docs/design.md, Layout). copier update re-renders the template's
own files with the new import paths; this migration rewrites the files the
service owns (internal/ratelimits/properties.go, and any other Go file of the
project) so that they build against the new ratekit:

    core/config             -> controlplane/config
    core/rulestore          -> controlplane/rulestore
    core/rulestore/admin    -> pages/admin
    core/rollout            -> controlplane/rollout
    core/remoterules        -> controlplane/remoterules
    core/observe            -> observability/observe
    core/observe/debugpage  -> pages/debug (imported as debugpage, its old name)

Only import paths change (then gofmt orders the import blocks, when it is on
PATH). The script is idempotent, uses the standard library only (it runs
under copier's Python) and prints each file it changed.

Usage: move_packages.py [--project DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

SKIP_DIRS = {".git", "vendor", "node_modules", ".venv"}
MOD = "github.com/ratekit/ratekit/"
# Longest first: a subpackage before its parent.
MOVES = [
    ("core/observe/debugpage", "pages/debug"),
    ("core/rulestore/admin", "pages/admin"),
    ("core/remoterules", "controlplane/remoterules"),
    ("core/rulestore", "controlplane/rulestore"),
    ("core/config", "controlplane/config"),
    ("core/rollout", "controlplane/rollout"),
    ("core/observe", "observability/observe"),
]


def rewrite(src: str) -> str:
    # The debug page's package is now named debug: an unaliased import keeps
    # the name debugpage that the code uses. Only an import spec that starts
    # with the path is unaliased (an aliased one is rewritten below).
    src = re.sub(r'^([ \t]*(?:import[ \t]+)?)"' + re.escape(MOD) + r'core/observe/debugpage"',
                 r'\1debugpage "' + MOD + 'pages/debug"', src, flags=re.M)
    for old, new in MOVES:
        src = re.sub('"' + re.escape(MOD + old) + r'(/[^"]*)?"',
                     lambda m: '"' + MOD + new + (m.group(1) or "") + '"', src)
    return src


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", default=".")
    args = ap.parse_args()
    changed = []
    for root, dirs, files in os.walk(args.project):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in files:
            if not name.endswith(".go"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                src = f.read()
            out = rewrite(src)
            if out != src:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(out)
                changed.append(os.path.relpath(path, args.project))
    # The new paths sort differently: gofmt puts the import blocks in order.
    gofmt = shutil.which("gofmt")
    if changed and gofmt:
        subprocess.run([gofmt, "-w"] + [os.path.join(args.project, p) for p in changed], check=False)
    for p in sorted(changed):
        print(f"move_packages: rewrote the ratekit imports of {p} (packages moved out of core/); run `make tidy`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
