#!/usr/bin/env bash
# Renames and fixes up the pages swift-argument-parser's generate-manual writes (`bgtask.policy.check.1`, NAME
# "bgtask policy check") into the git-style pages man and mandb expect: `bgtask-policy-check.1`, whose NAME is the
# page's own name (what `whatis`/`apropos` index, and what lintian's bad-whatis-entry checks), while the SYNOPSIS
# still shows the command as it is typed. The synthesized `help` subcommands get no page.
# Usage: man-pages.sh RAWDIR OUTDIR
set -euo pipefail
raw=$1 out=$2
for f in "$raw"/*.1; do
  base=$(basename "$f" .1)
  [[ $base == *.help ]] && continue
  page=${base//./-}
  typed=${base//./ }
  if [[ $page == "$typed" ]]; then
    cp "$f" "$out/$page.1"       # a top-level command: its name already is the page's
    continue
  fi
  # .Dt: the page title; the first .Nm (NAME): the page name; the bare .Nm later (SYNOPSIS): the typed command.
  sed -e "s/^\.Dt [^ ]* /.Dt ${page^^} /" \
      -e "0,/^\.Nm \"/s/^\.Nm \".*\"\$/.Nm $page/" \
      -e "s/^\.Nm\$/.Nm \"$typed\"/" "$f" > "$out/$page.1"
done
