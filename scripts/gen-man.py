#!/usr/bin/env python3
"""Man pages from the argument-parser definitions: `CMD --experimental-dump-help` (JSON) → one roff page per
command and subcommand (bgtask.1, bgtask-run.1, bgtask-policy-check.1, …). Usage: gen-man.py BINDIR OUTDIR."""
import json, os, subprocess, sys

def esc(s):
    s = (s or "").replace("\\", "\\e")
    return "\n".join(("\\&" + l if l.startswith((".", "'")) else l) for l in s.split("\n"))

def names(arg):
    out = []
    for n in arg.get("names", []):
        k = n.get("kind")
        out.append(("-" if k == "short" else "--") + n["name"] if k in ("short", "long", "longWithSingleDash") else n["name"])
    return out

def page(cmd, path, out, date):
    title = "-".join(path)
    lines = [f'.TH "{title.upper()}" 1 "{date}" "bgtask" "User Commands"', ".SH NAME", f"{title} \\- {esc(cmd.get('abstract', ''))}"]
    synopsis = " ".join(path)
    args = [a for a in cmd.get("arguments", []) if a.get("shouldDisplay", True)]
    for a in args:
        if a.get("kind") == "positional":
            synopsis += f" {'[' if a.get('isOptional') else ''}<{a.get('valueName', 'arg')}>{'...' if a.get('isRepeating') else ''}{']' if a.get('isOptional') else ''}"
    if any(a.get("kind") != "positional" for a in args):
        synopsis = synopsis.replace(" ".join(path), " ".join(path) + " [options]", 1)
    if cmd.get("subcommands"):
        synopsis += " <subcommand>"
    lines += [".SH SYNOPSIS", f".B {esc(synopsis)}"]
    if cmd.get("discussion"):
        lines += [".SH DESCRIPTION", esc(cmd["discussion"])]
    if args:
        lines.append(".SH OPTIONS")
        for a in args:
            label = ", ".join(names(a)) if a.get("kind") != "positional" else f"<{a.get('valueName', 'arg')}>"
            if a.get("kind") == "option":
                label += f" <{a.get('valueName', 'value')}>"
            lines += [".TP", f".B {esc(label)}", esc(a.get("abstract", "")) + (f" (default: {esc(a['defaultValue'])})" if a.get("defaultValue") else "")]
    subs = [s for s in cmd.get("subcommands", []) if s.get("shouldDisplay", True) and s["commandName"] != "help"]
    if subs:
        lines.append(".SH SUBCOMMANDS")
        for s in subs:
            lines += [".TP", f".B {esc(s['commandName'])}", esc(s.get("abstract", "")) + f" See \\fB{title}-{s['commandName']}\\fR(1)."]
    lines += [".SH SEE ALSO", "\\fBbgtask\\fR(1), \\fBbgtaskd\\fR(1), \\fBbgtask-policy\\fR(5)"]
    with open(os.path.join(out, title + ".1"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for s in subs:
        page(s, path + [s["commandName"]], out, date)

def main():
    bindir, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    date = subprocess.run(["date", "+%Y-%m-%d"], capture_output=True, text=True).stdout.strip()
    for tool in ("bgtask", "bgtaskd"):
        dump = subprocess.run([os.path.join(bindir, tool), "--experimental-dump-help"], capture_output=True, text=True, check=True).stdout
        page(json.loads(dump)["command"], [tool], out, date)

main()
