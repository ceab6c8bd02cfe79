#!/usr/bin/env python3
"""The man pages, one per command (git-style names: bgtask-policy-check.1), from two sources that cannot drift
apart: each command's NAME, SYNOPSIS, OPTIONS and subcommands from the binary itself
(`--experimental-dump-help`, swift-argument-parser's description of every argument), and the prose no parser
knows — DESCRIPTION beyond the help text, EXIT STATUS, ENVIRONMENT, FILES, EXAMPLES, SEE ALSO — from
docs/man/pages.md. Every page gets the same sections; a page with no EXAMPLES or EXIT STATUS written for it
fails the build instead of shipping a stub.

Usage: man-pages.py OUTDIR DATE VERSION BINARY...   (run from the repository root)"""
import json, os, re, subprocess, sys

out_dir, date, version, binaries = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]


def roff_text(s, markup=True):
    """Inline markdown → roff: `code` and **bold** bold, *x* italic (markup=False: help text, where `*` is
    literal — `*-*-1`), links to their text; escapes."""
    pieces = s.split("`")
    if len(pieces) % 2 == 0:       # an unpaired backtick: no code span
        pieces = [s]
    for i, p in enumerate(pieces):
        p = p.replace("\\", "\\e").replace("-", "\\-")
        if i % 2 == 1:
            p = "\\fB" + p + "\\fR"
        elif markup:
            p = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", p)
            p = re.sub(r"(?<![\w*])\*([A-Za-z][^*]*)\*(?![\w*])", r"\\fI\1\\fR", p)
            p = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", p)
        pieces[i] = p
    s = "".join(pieces)
    return "\\&" + s if s.startswith((".", "'")) else s


def markdown(text):
    """Paragraphs, `- ` lists, `term: text` definition lines starting with `: `, and fenced code."""
    lines, out, code = text.strip("\n").split("\n"), [], False
    para = []
    def flush():
        if para:
            out.append(roff_text(" ".join(l.strip() for l in para)))
            para.clear()
    for line in lines:
        if line.startswith("```"):
            flush()
            out += ([".PP", ".EX"] if not code else [".EE"])
            code = not code
            continue
        if code:
            l = line.replace("\\", "\\e")
            out.append("\\&" + l if l.startswith((".", "'")) else l)
            continue
        m = re.match(r"^: (\S.*?)  (.*)$", line)
        if m:
            flush()
            out += [".TP", roff_text(m.group(1)), roff_text(m.group(2))]
        elif re.match(r"^\s*- ", line):
            flush()
            out += [".IP \\(bu 2", roff_text(re.sub(r"^\s*- ", "", line))]
        elif line.strip() == "":
            flush()
            out.append(".PP")
        elif line.startswith("  ") and out and (out[-1].startswith(".IP") or not para) and not para:
            out.append(roff_text(line.strip()))
        else:
            para.append(line)
    flush()
    while out and out[0] == ".PP":
        out.pop(0)
    return out


# Where this install puts what the pages name by their /usr paths (a Debian package's): a `make install
# PREFIX=~/.local` page names ~/.local/libexec/bgtask/bgtask-cli, not a /usr file that is not there. Given by the
# Makefile in the environment (MAN_LIBEXECDIR, …); unset, the /usr paths stay. The home directory is said as ~.
def installed(text):
    home = os.environ.get("HOME", "")
    def at(var, tail=""):
        d = os.environ.get(var)
        if not d:
            return None
        d = d.rstrip("/") + tail
        return "~" + d[len(home):] if home not in ("", "/") and d.startswith(home + "/") else d
    for usr, new in [("/usr/libexec/bgtask/", at("MAN_LIBEXECDIR", "/bgtask/")), ("/usr/lib/systemd/user/", at("MAN_USERUNITDIR", "/")),
                     ("/usr/share/dbus-1/services/", at("MAN_DBUSSERVICEDIR", "/")),
                     ("/usr/share/dbus-1/interfaces/", at("MAN_DATADIR", "/dbus-1/interfaces/")),
                     ("/usr/share/bgtask/policies", at("MAN_DATADIR", "/bgtask/policies")), ("/usr/share/doc/bgtask", at("MAN_DOCDIR"))]:
        if new:
            text = text.replace(usr, new)
    return text


def supplements(path):
    """docs/man/pages.md: `# page-name` then `## SECTION` blocks, its /usr paths the install's own (`installed`)."""
    pages, page, section = {}, None, None
    for line in installed(open(path, encoding="utf-8").read()).split("\n"):
        if line.startswith("# "):
            page, section = line[2:].strip(), None
            pages[page] = {}
        elif line.startswith("## ") and page:
            section = line[3:].strip().upper()
            pages[page][section] = ""
        elif page and section:
            pages[page][section] += line + "\n"
    return pages


def option_line(a):
    names = [("--" if n["kind"] in ("long", "longWithSingleDash") else "-") + n["name"] for n in a.get("names", [])]
    value = "" if a["kind"] == "flag" else " \\fI" + a.get("valueName", "value") + "\\fR"
    return ", ".join("\\fB" + n.replace("-", "\\-") + "\\fR" for n in names) + value


def synopsis(path, c):
    parts = [".B " + " ".join(path)]
    words = []
    opts = [a for a in c.get("arguments", []) if a["kind"] != "positional" and a.get("shouldDisplay", True)]
    # The help command swift-argument-parser adds to every root is no command of its own: bgtaskd has none.
    if any(x["commandName"] != "help" and x.get("shouldDisplay", True) for x in c.get("subcommands", [])):
        words.append("\\fIcommand\\fR")
    if opts:
        words.append("[\\fIoptions\\fR]")
    for a in c.get("arguments", []):
        if a["kind"] != "positional" or not a.get("shouldDisplay", True):
            continue
        w = "\\fI" + a.get("valueName", "arg") + "\\fR" + ("\\ ..." if a.get("isRepeating") else "")
        if a.get("valueName") == "command":
            w = "[\\fB\\-\\-\\fR] \\fIcommand\\fR [\\fIargument\\fR\\ ...]"
        words.append("[" + w + "]" if a.get("isOptional") and a.get("valueName") != "command" else w)
    return parts + [" ".join(words)] if words else parts


def page(path, c, sup, see_also_pages):
    name = "-".join(path)
    s = sup.get(name)
    if s is None:
        sys.exit(f"man-pages.py: docs/man/pages.md has no '# {name}' (every command needs its page written)")
    for need in ("EXAMPLES", "SEE ALSO"):
        if not s.get(need, "").strip():
            sys.exit(f"man-pages.py: docs/man/pages.md, {name}: no {need} (no stub page ships)")
    discussion = c.get("discussion", "")
    exit_status = s.get("EXIT STATUS", "").strip()
    m = re.search(r"\s*Exit status: (.*?)(?:\n\n|$)", discussion, re.S)
    if m:
        discussion = (discussion[:m.start()] + discussion[m.end():]).strip()
        exit_status = ("Exit status: " + m.group(1).strip() + "\n\n" + exit_status).strip()
    if not exit_status:
        sys.exit(f"man-pages.py: {name}: no EXIT STATUS (neither in its help nor in docs/man/pages.md)")

    r = [f'.TH "{name.upper()}" 1 "{date}" "bgtask {version}" "User Commands"', ".SH NAME",
         f"{name} \\- {roff_text(c.get('abstract', '').rstrip('.'), markup=False)}", ".SH SYNOPSIS"]
    r += synopsis(path, c)
    r += [".SH DESCRIPTION"] + markdown(c.get("abstract", "") + "\n\n" + discussion + "\n\n" + s.get("DESCRIPTION", ""))
    subs = [x for x in c.get("subcommands", []) if x["commandName"] != "help" and x.get("shouldDisplay", True)]
    if subs:
        r.append(".SH COMMANDS")
        for x in subs:
            r += [".TP", "\\fB" + x["commandName"] + "\\fR", roff_text(x.get("abstract", ""), markup=False) +
                  " See \\fB" + "-".join(path + [x["commandName"]]) + "\\fR(1)."]
    opts = [a for a in c.get("arguments", []) if a.get("shouldDisplay", True)]
    r.append(".SH OPTIONS")
    for a in opts:
        if a["kind"] == "positional":
            head = "\\fI" + a.get("valueName", "arg") + "\\fR" + ("\\ ..." if a.get("isRepeating") else "")
        else:
            head = option_line(a)
        text = a.get("abstract", "")
        if a.get("defaultValue") and a["kind"] == "option" and "default" not in text:
            text += f" (default: {a['defaultValue']})"
        r += [".TP", head, roff_text(text, markup=False)]
    r += [".SH \"EXIT STATUS\""] + markdown(exit_status)
    r += [".SH ENVIRONMENT"] + markdown(s.get("ENVIRONMENT", "").strip() or
                                        "`NO_COLOR`, `BGTASK_STATE_DIR`, `BGTASK_POLICY_DIR` and the others: see **bgtask**(1).")
    r += [".SH FILES"] + markdown(s.get("FILES", "").strip() or "The policy layers and state directory: see **bgtask**(1).")
    r += [".SH EXAMPLES"] + markdown(s["EXAMPLES"])
    refs = [x.strip() for x in re.split(r",\s*", s["SEE ALSO"].strip()) if x.strip()]
    related = ["-".join(path[:i]) + "(1)" for i in range(1, len(path))] + ["-".join(path + [x["commandName"]]) + "(1)" for x in subs]
    seen, ordered = set(), []
    for ref in related + refs:
        if ref not in seen and ref != name + "(1)":
            seen.add(ref)
            ordered.append(ref)
    see_also_pages[name] = ordered
    r += [".SH \"SEE ALSO\"", ",\n".join(re.sub(r"^(.+)\((\d)\)$", r"\\fB\1\\fR(\2)", x.replace("-", "\\-")) for x in ordered)]
    with open(f"{out_dir}/{name}.1", "w", encoding="utf-8") as f:
        f.write("\n".join(r) + "\n")


sup = supplements("docs/man/pages.md")
see_also = {}
for binary in binaries:
    tree = json.loads(subprocess.run([binary, "--experimental-dump-help"], capture_output=True, text=True, check=True).stdout)["command"]
    def walk(c, path):
        page(path, c, sup, see_also)
        for x in c.get("subcommands", []):
            if x["commandName"] != "help" and x.get("shouldDisplay", True):
                walk(x, path + [x["commandName"]])
    walk(tree, [tree["commandName"]])
unused = set(sup) - set(see_also) - {"bgtask-policy"}
if unused:
    sys.exit(f"man-pages.py: docs/man/pages.md describes commands that do not exist: {sorted(unused)}")
json.dump(see_also, open(f"{out_dir}/see-also.json", "w"), indent=1)
