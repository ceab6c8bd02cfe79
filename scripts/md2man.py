#!/usr/bin/env python3
"""docs/policy.md (written in man-page sections) → roff: `md2man.py FILE NAME SECTION`. Headings, paragraphs,
lists, fenced code and pipe tables; inline `code` becomes bold. Enough for our own documents, not a general tool."""
import re, subprocess, sys

path, name, section = sys.argv[1], sys.argv[2], sys.argv[3]
date = subprocess.run(["date", "+%Y-%m-%d"], capture_output=True, text=True).stdout.strip()

def inline(s):
    s = s.replace("\\", "\\e")
    s = re.sub(r"`([^`]*)`", r"\\fB\1\\fR", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", s)
    s = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", s)
    return "\\&" + s if s.startswith((".", "'")) else s

out = [f'.TH "{name.upper()}" {section} "{date}" "bgtask" "File Formats"', ".ad l"]
code = False
table = []
def flush_table():
    global table
    if not table:
        return
    rows = [[c.strip() for c in r.strip().strip("|").split("|")] for r in table if not re.match(r"^\|[-| :]+\|$", r.strip())]
    if rows:
        n = max(len(r) for r in rows)
        out.extend([".TS", "allbox;", " ".join(["lx"] * n) + "."])
        for r in rows:
            out.append("\t".join("T{\n" + inline(c).replace("\t", " ") + "\nT}" for c in r + [""] * (n - len(r))))
        out.append(".TE")
    table = []

for line in open(path, encoding="utf-8").read().split("\n"):
    if line.startswith("```"):
        flush_table()
        out.append(".EX" if not code else ".EE")
        code = not code
        continue
    if code:
        l = line.replace("\\", "\\e")
        out.append("\\&" + l if l.startswith((".", "'")) else l)
        continue
    if line.startswith("|"):
        table.append(line)
        continue
    flush_table()
    if line.startswith("# "):
        out += [".SH NAME", re.sub(r"^(\S+)\(\d\) — ", r"\1 \\- ", inline(line[2:].strip()))]
    elif line.startswith("## "):
        out.append(".SH " + inline(line[3:].strip().upper()))
    elif line.startswith("### "):
        out.append(".SS " + inline(line[4:].strip()))
    elif re.match(r"^\s*[-*] ", line):
        out += [".IP \\(bu 2", inline(re.sub(r"^\s*[-*] ", "", line))]
    elif line.strip() == "":
        out.append(".PP")
    else:
        out.append(inline(line.strip()))
flush_table()
print("\n".join(out))
