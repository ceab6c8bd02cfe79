#!/usr/bin/env python3
"""The sizes docs/architecture.md keeps: Swift files over 400 lines, and types with more than 15 stored
properties (instance `var`/`let` declared in the type's body or its extensions' — extensions cannot store, so
the body). A rough reader of Swift: braces, comments and string literals are enough for this code base.

  scripts/type-sizes.py [--markdown]      (from the repository's root)
"""
import os
import re
import sys

DECL = re.compile(r'^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|private|fileprivate|internal|open|final|indirect|nonisolated|'
                  r'package)(?:\([^)]*\))?\s+)*(class|struct|enum|actor)\s+(\w+)')
STORED = re.compile(r'^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|private|fileprivate|internal|open|weak|unowned|lazy|'
                    r'nonisolated\(unsafe\)|nonisolated|package)(?:\([^)]*\))?\s+)*(var|let)\s+\w+')


def strip(line, in_block):
    """The line without comments and string contents; whether a block comment is still open."""
    out, i, in_str = [], 0, False
    while i < len(line):
        if in_block:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out), True
            in_block, i = False, j + 2
            continue
        c = line[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            in_block, i = True, i + 2
            continue
        if c == '"':
            in_str = True
        out.append(c)
        i += 1
    return "".join(out), in_block


def scan(path):
    types, stack, depth, in_block, in_multiline = [], [], 0, False, False
    for raw in open(path, encoding="utf-8"):
        if raw.count('"""') % 2 == 1:
            in_multiline = not in_multiline
            continue
        if in_multiline:
            continue
        line, in_block = strip(raw, in_block)
        m = DECL.match(line)
        if stack and depth == stack[-1][1] + 1 and not m:
            s = STORED.match(line)
            rest = line[s.end():] if s else ""
            computed = "{" in rest and not re.search(r"\{\s*(didSet|willSet)", rest)
            if s and "static " not in line and "class var" not in line and not computed:
                stack[-1][2] += 1
        if m and "{" in line:
            stack.append([m.group(2), depth, 0, m.group(1)])
        depth += line.count("{") - line.count("}")
        while stack and depth <= stack[-1][1]:
            name, _, n, kind = stack.pop()
            types.append((name, kind, n))
    return types


def main():
    markdown = "--markdown" in sys.argv
    files, types = [], []
    for root, _, names in os.walk("Sources"):
        for n in sorted(names):
            if n.endswith(".swift"):
                p = os.path.join(root, n)
                lines = sum(1 for _ in open(p, encoding="utf-8"))
                if lines > 400:
                    files.append((lines, p))
                for name, kind, count in scan(p):
                    if count > 15:
                        types.append((count, f"{kind} {name}", p))
    if markdown:
        print("| file | lines |\n|---|---|")
        for lines, p in sorted(files, reverse=True):
            print(f"| `{p}` | {lines} |")
        print("\n| type | stored properties | file |\n|---|---|---|")
        for count, t, p in sorted(types, reverse=True):
            print(f"| `{t}` | {count} | `{p}` |")
    else:
        for lines, p in sorted(files, reverse=True):
            print(f"{lines:5} lines  {p}")
        for count, t, p in sorted(types, reverse=True):
            print(f"{count:5} stored  {t}  ({p})")


main()
