#!/usr/bin/env bash
# `make install DESTDIR=… PREFIX=/usr` into a temporary root, then checks the layout, that every man page
# renders, that the completion scripts load in bash, zsh and fish, and that the installed binary finds its
# own policies and runs. CI runs it after the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
make install DESTDIR="$root" PREFIX=/usr >/dev/null
fail() { echo "check-install: $*" >&2; exit 1; }
for f in usr/bin/bgtask usr/bin/bgtaskd usr/libexec/bgtask/bgtask-cli usr/share/bgtask/policies/default.toml usr/share/man/man1/bgtask.1 \
         usr/share/man/man1/bgtask-run.1 usr/share/man/man1/bgtask-submit.1 usr/share/man/man1/bgtask-policy-check.1 \
         usr/share/man/man1/bgtaskd.1 usr/share/man/man5/bgtask-policy.5 usr/share/bash-completion/completions/bgtask \
         usr/share/zsh/site-functions/_bgtask usr/share/fish/vendor_completions.d/bgtask.fish \
         usr/lib/systemd/user/bgtaskd.service usr/share/dbus-1/services/io.github.bgtask.Scheduler1.service \
         usr/share/dbus-1/interfaces/io.github.bgtask.Scheduler1.xml etc/bgtask/policy.d/README; do
  [[ -f "$root/$f" ]] || fail "missing $f"
done
grep -q '^ExecStart=/usr/bin/bgtaskd$' "$root/usr/lib/systemd/user/bgtaskd.service" || fail "unit's ExecStart"
grep -q '^Exec=/usr/bin/bgtaskd$' "$root/usr/share/dbus-1/services/io.github.bgtask.Scheduler1.service" || fail "activation Exec"
! grep -A2 '^\.SH SYNOPSIS' "$root/usr/share/man/man1/bgtaskd.1" | grep -q 'command' || fail "bgtaskd(1)'s SYNOPSIS names a subcommand it has not"
# The README's first command: a prefix in the home directory puts the user unit where systemd --user reads it.
home="$root/home"
mkdir -p "$home"
HOME="$home" make install PREFIX="$home/.local" >/dev/null
grep -q "^ExecStart=$home/.local/bin/bgtaskd\$" "$home/.local/share/systemd/user/bgtaskd.service" || fail "home prefix: the user unit"
[[ -f "$home/.local/share/dbus-1/services/io.github.bgtask.Scheduler1.service" ]] || fail "home prefix: the activation file"
[[ ! -e "$home/.local/etc" ]] || fail "home prefix: $home/.local/etc made, a directory bgtask never reads"
! grep -q '/usr/libexec\|/usr/share/bgtask' "$home/.local/share/man/man1/bgtask.1" || fail "home prefix: bgtask(1) names /usr files it did not install"
grep -q '~/.local/libexec/bgtask/bgtask\\-cli' "$home/.local/share/man/man1/bgtask.1" || fail "home prefix: bgtask(1) does not name its bgtask-cli"
"$home/.local/bin/bgtask" policy check >/dev/null || fail "home prefix: the installed bgtask"
for b in usr/bin/bgtask usr/bin/bgtaskd usr/libexec/bgtask/bgtask-cli; do
  file "$root/$b" 2>/dev/null | grep -q "not stripped" && fail "$b is not stripped"
done
# The front hands every command but a plain submit to the full CLI in libexec: both find it where installed.
[[ $("$root/usr/bin/bgtask" --version) == $("$root/usr/libexec/bgtask/bgtask-cli" --version) ]] || fail "bgtask --version: the front does not reach bgtask-cli"
[[ $("$home/.local/bin/bgtask" --version) == $("$root/usr/bin/bgtask" --version) ]] || fail "home prefix: the front does not reach bgtask-cli"
# Every page renders without a warning from groff (man --warnings), and has the sections every page has.
pages=0
for page in "$root"/usr/share/man/man1/*.1 "$root"/usr/share/man/man5/*.5; do
  out=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null) || fail "man -l $page"
  [[ -z "$out" ]] || fail "man --warnings -l $page: $out"
  if [[ $page == *.1 ]]; then
    for s in NAME SYNOPSIS DESCRIPTION OPTIONS '"EXIT STATUS"' ENVIRONMENT FILES EXAMPLES '"SEE ALSO"'; do
      grep -q "^\.SH $s\$" "$page" || fail "$(basename "$page"): no $s section"
    done
  fi
  pages=$((pages + 1))
done
# Every SEE ALSO resolves: our own pages among the installed ones (each bgtask command has its page), others
# (systemd.time(7) …) with man -w where the system's pages are installed.
own=$(cd "$root/usr/share/man" && ls man1 man5 | grep -E '\.[15]$' | sed -E 's/\.([15])$/(\1)/')
commands=$("$root/usr/bin/bgtask" --experimental-dump-help | python3 -c 'import json, sys
def walk(c, p):
    for x in c.get("subcommands", []):
        if x["commandName"] != "help": print(p + x["commandName"]); walk(x, p + x["commandName"] + "-")
walk(json.load(sys.stdin)["command"], "bgtask-")')
for cmd in $commands; do grep -qx "$cmd(1)" <<<"$own" || fail "no man page for $cmd"; done
unresolved=()
for page in "$root"/usr/share/man/man1/*.1 "$root"/usr/share/man/man5/*.5; do
  refs=$(sed -n '/^\.SH "SEE ALSO"/,/^\.SH/p' "$page" | grep -oE '\\fB[^\\]+(\\-[^\\]+)*\\fR\([0-9]\)' | sed -E 's/\\fB//; s/\\fR//; s/\\-/-/g' || true)
  [[ -n "$refs" ]] || fail "$(basename "$page"): an empty SEE ALSO"
  for ref in $refs; do
    grep -qx "$ref" <<<"$own" && continue
    [[ $ref == bgtask* ]] && fail "$(basename "$page"): SEE ALSO $ref is not installed"
    name=${ref%(*} sect=${ref#*(}; sect=${sect%)}
    if man -w systemd >/dev/null 2>&1; then man -w "$sect" "$name" >/dev/null 2>&1 || fail "$(basename "$page"): SEE ALSO $ref does not resolve"
    else unresolved+=("$ref"); fi
  done
done
(( ${#unresolved[@]} == 0 )) || echo "check-install: the system's man pages are not installed; not checked: $(printf '%s\n' "${unresolved[@]}" | sort -u | tr '\n' ' ')"
bash -c "source '$root/usr/share/bash-completion/completions/bgtask' && complete -p bgtask >/dev/null" || fail "bash completion"
if command -v zsh >/dev/null; then
  zsh -f -c "autoload -U compinit && compinit -u && source '$root/usr/share/zsh/site-functions/_bgtask'" || fail "zsh completion"
fi
if command -v fish >/dev/null; then
  fish --no-config -c "source '$root/usr/share/fish/vendor_completions.d/bgtask.fish'; and complete -c bgtask | grep -q ." || fail "fish completion"
fi
# The installed binary alone finds its shipped policies under its own prefix.
show=$(env -u BGTASK_POLICY_DIR "$root/usr/bin/bgtask" policy show 2>&1) || fail "policy show: $show"
grep -q "$root/usr/share/bgtask/policies/default.toml" <<<"$show" || grep -q "share/bgtask/policies/default.toml" <<<"$show" || fail "policies not found under the prefix: $(head -3 <<<"$show")"
"$root/usr/bin/bgtaskd" --version >/dev/null || fail "bgtaskd --version"
size=$(du -m "$root/usr/libexec/bgtask/bgtask-cli" | cut -f1)
front=$(du -k "$root/usr/bin/bgtask" | cut -f1)
# Issue 11's goal; over it means the empty ICU package (Sources/CICUNoData) no longer replaces Foundation's data,
# e.g. a toolchain with another ICU version (then set BGTASK_ICU_VERSION in Package.swift's cSettings).
(( size <= 40 )) || fail "the installed bgtask-cli is ${size} MB, over 40 MB"
# The front stays a front: Embedded Swift of about 50 KB, no Swift runtime linked in.
(( front <= 512 )) || fail "the installed bgtask (the front) is ${front} KB, over 512 KB"
echo "check-install: ok (bgtask ${front} KB and bgtask-cli ${size} MB stripped; $pages man pages render and link; completions load)"
