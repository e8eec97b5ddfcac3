#!/usr/bin/env python3
"""Rename a limiter in a service's ratekit rule files (a copier migration).

copier update already moves the template's own files (available_limiters.yaml,
rate_limits.example.yaml) to the new name by re-rendering them and re-applying
the service's edits. This migration renames the limiter where the template
cannot see it: the service's own rule documents (rate_limits.yaml, per
environment copies, anything whose top-level key is `rate_limits` or
`available_limiters`), and it finishes the rename in available_limiters.yaml if
the service's edits kept the old key there.

Only the key line changes, so comments and formatting survive. The script is
idempotent, uses the standard library only (it runs under copier's Python), and
refuses (exit 1) a document that declares both names; a run that renames nothing
says so. It also lists Go files
that still spell the old name as a string literal, for a human to fix, and
reminds that counters and Redis rule documents live under limiter names.

Usage: rename_limiter.py --from OLD --to NEW [--project DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import sys

NAME = re.compile(r"^[a-z0-9_]{1,64}$")
DOC_KEYS = ("rate_limits", "available_limiters")
SKIP_DIRS = {".git", "vendor", "node_modules", ".venv"}
CONFLICT = re.compile(r"^(<{7}|>{7})( |$)", re.M)


class Conflict(Exception):
    pass


def top_key(line: str) -> str | None:
    """Returns the key of a column-0 mapping line, else None."""
    m = re.match(r"""^(["']?)([A-Za-z0-9_]+)\1\s*:(\s|$)""", line)
    return m.group(2) if m else None


def rename_in_doc(text: str, old: str, new: str, path: str) -> tuple[str, int]:
    """Renames the child key `old` of every top-level rule-document key."""
    lines = text.splitlines(keepends=True)
    out = []
    changed = 0
    block = False  # inside rate_limits: / available_limiters:
    child_indent = None
    seen: dict[str, int] = {}
    for no, line in enumerate(lines, 1):
        stripped = line.strip()
        if line[:1] not in (" ", "\t", "") and stripped and not stripped.startswith("#"):
            key = top_key(line)
            block = key in DOC_KEYS
            child_indent = None
            seen = {}
            out.append(line)
            continue
        if block and stripped and not stripped.startswith("#"):
            indent = len(line) - len(line.lstrip(" "))
            if child_indent is None:
                child_indent = indent
            if indent == child_indent:
                m = re.match(r"""^( *)(["']?)([A-Za-z0-9_]+)\2(\s*:.*)$""", line, re.S)
                if m:
                    key = m.group(3)
                    if key in (old, new):
                        if key == old:
                            line = f"{m.group(1)}{m.group(2)}{new}{m.group(2)}{m.group(4)}"
                            changed += 1
                        if (key == old and new in seen) or (key == new and old in seen):
                            raise Conflict(
                                f"{path}:{no}: declares both limiters {old!r} and {new!r}; "
                                f"merge the rules of {old!r} into {new!r} by hand, then run copier update again"
                            )
                        seen[key] = no
        out.append(line)
    return "".join(out), changed


def is_rule_doc(text: str) -> bool:
    return any(top_key(l) in DOC_KEYS for l in text.splitlines() if l[:1] not in (" ", "\t", "#"))


def walk(root: str):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for f in sorted(filenames):
            yield os.path.join(dirpath, f)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="old", required=True)
    ap.add_argument("--to", dest="new", required=True)
    ap.add_argument("--project", default=".")
    args = ap.parse_args(argv)
    for n in (args.old, args.new):
        if not NAME.match(n):
            print(f"rename_limiter: invalid limiter name {n!r} (^[a-z0-9_]{{1,64}}$)", file=sys.stderr)
            return 2
    root = os.path.abspath(args.project)
    renamed, failed, go_refs = [], [], []
    literal = f'"{args.old}"'
    for path in walk(root):
        rel = os.path.relpath(path, root)
        if path.endswith((".yaml", ".yml")):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if not is_rule_doc(text):
                continue
            if CONFLICT.search(text):
                failed.append(f"{rel}: has merge conflict markers; resolve them, then rename {args.old!r} to {args.new!r} by hand")
                continue
            try:
                new_text, n = rename_in_doc(text, args.old, args.new, rel)
            except Conflict as e:
                failed.append(str(e))
                continue
            if n:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new_text)
                renamed.append(rel)
        elif path.endswith(".go"):
            with open(path, encoding="utf-8", errors="replace") as f:
                for no, line in enumerate(f, 1):
                    if literal in line:
                        go_refs.append(f"{rel}:{no}")
    for rel in renamed:
        print(f"rename_limiter: {rel}: limiter {args.old!r} renamed to {args.new!r}")
    if not renamed and not failed:
        print(f"rename_limiter: no rule document declares limiter {args.old!r}: nothing renamed")
    for ref in go_refs:
        print(f"rename_limiter: warning: {ref}: Go code still names limiter {literal}; use {args.new!r}", file=sys.stderr)
    if renamed or go_refs:
        print(
            f"rename_limiter: note: counters and Redis rule documents are kept per limiter name; "
            f"rules published for {args.old!r} must be published again for {args.new!r}",
            file=sys.stderr,
        )
    for msg in failed:
        print(f"rename_limiter: error: {msg}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
