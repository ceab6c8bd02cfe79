#!/usr/bin/env python3
"""docs/policy.md (written in man-page sections) → roff: `md2man.py FILE NAME SECTION [DOCDIR]`, where the
installed copies of docs/*.md are (a page names them there, not in the source tree). Headings, paragraphs,
lists, fenced code and pipe tables; inline `code` becomes bold. Enough for our own documents, not a general tool."""
import re, subprocess, sys

path, name, section = sys.argv[1], sys.argv[2], sys.argv[3]
docdir = sys.argv[4] if len(sys.argv) > 4 else "/usr/share/doc/bgtask"
date = subprocess.run(["date", "+%Y-%m-%d"], capture_output=True, text=True).stdout.strip()

def inline(s):
    s = re.sub(r"\bdocs/(\w+\.md)\b", docdir + r"/\1", s)
    s = s.replace("\\", "\\e")
    s = re.sub(r"`([^`]*)`", r"\\fB\1\\fR", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", s)
    s = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", s)
    # A page reference, bgtask-policy-check(1): the name bold, as man pages write them.
    s = re.sub(r"(?<![\w\\-])([a-z][\w.-]*)\((\d)\)", lambda m: "\\fB" + m.group(1).replace("-", "\\-") + "\\fR(" + m.group(2) + ")", s)
    return "\\&" + s if s.startswith((".", "'")) else s

out = [f'.TH "{name.upper()}" {section} "{date}" "bgtask" "File Formats"', ".ad l"]
code = False
table = []
def flush_table():
    global table
    if not table:
        return
    # Cells split at `|` outside code spans: `a || b` in a cell is one cell.
    def cells(r):
        out, cur, code = [], "", False
        for ch in r.strip().strip("|"):
            if ch == "`":
                code = not code
            if ch == "|" and not code:
                out.append(cur.strip()); cur = ""
            else:
                cur += ch
        return out + [cur.strip()]
    rows = [cells(r) for r in table if not re.match(r"^\|[-| :]+\|$", r.strip())]
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
        m = re.match(r"^(\S+)\(\d\) — (.*)$", line[2:].strip())    # NAME as whatis(1) reads it: plain name \- text
        out += [".SH NAME", m.group(1) + " \\- " + inline(m.group(2)) if m else inline(line[2:].strip())]
    elif line.startswith("## "):
        out.append(".SH \"" + inline(line[3:].strip().upper()) + "\"")
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
