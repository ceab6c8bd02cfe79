#!/usr/bin/env python3
"""The completion scripts: swift-argument-parser's own for bash, zsh and fish, with what it cannot express.

- The command of `bgtask run` / `bgtask submit` (after `--`, or from the first word that is not an option)
  completes as a command line of its own — the command's name, then its own arguments with its own
  completion — as sudo, nice and systemd-run do.
- bash: the script is registered without `-o filenames`, which made bash add a slash to a subcommand or an
  id that is also a directory here; file names get it back only where files are completed.

Usage: completions.py BGTASK OUTDIR   (writes bgtask.bash, _bgtask, bgtask.fish)"""
import json, subprocess, sys

bgtask, out = sys.argv[1], sys.argv[2]


def script(shell):
    text = subprocess.run([bgtask, "--generate-completion-script", shell], capture_output=True, text=True, check=True).stdout
    if shell == "bash" and text.startswith("#!"):
        text = text.split("\n", 1)[1]          # sourced, not run
    return text


def replace_once(text, old, new, what):
    if text.count(old) < 1:
        sys.exit(f"completions.py: the generated {what} script changed: '{old}' not found (update scripts/completions.py)")
    return text.replace(old, new)


# The options of run and submit that take a value: the words to skip when looking for the command.
tree = json.loads(subprocess.run([bgtask, "--experimental-dump-help"], capture_output=True, text=True, check=True).stdout)["command"]
valued = set()
for sub in tree["subcommands"]:
    if sub["commandName"] in ("run", "submit"):
        for a in sub.get("arguments", []):
            if a["kind"] == "option":
                valued.update(("--" if n["kind"] == "long" else "-") + n["name"] for n in a["names"])
valued = sorted(valued)

bash = script("bash")
for pattern in ["__bgtask_add_completions -o plusdirs -f"]:
    bash = replace_once(bash, pattern, "compopt -o filenames 2>/dev/null; " + pattern, "bash")
bash = replace_once(bash, "complete -o filenames -F _bgtask bgtask", f"""# bgtask's own (scripts/completions.py): where the command of run/submit starts, or 0.
__bgtask_command_start() {{
    [[ ${{COMP_WORDS[1]}} == run || ${{COMP_WORDS[1]}} == submit ]] || {{ echo 0; return; }}
    local i=2
    while (( i < COMP_CWORD )); do
        case ${{COMP_WORDS[i]}} in
        --) echo $((i + 1)); return ;;
        {"|".join(valued)}) i=$((i + 2)); continue ;;
        -*) ;;
        *) echo "$i"; return ;;
        esac
        i=$((i + 1))
    done
    (( i == COMP_CWORD )) && [[ ${{COMP_WORDS[i]}} != -* ]] && {{ echo "$i"; return; }}
    echo 0
}}

_bgtask_complete() {{
    local start
    start=$(__bgtask_command_start)
    if (( start > 0 && COMP_CWORD >= start )); then
        if declare -F _command_offset >/dev/null; then
            _command_offset "$start"
        elif (( COMP_CWORD == start )); then
            COMPREPLY=($(compgen -c -- "${{COMP_WORDS[COMP_CWORD]}}"))
        else
            compopt -o default; COMPREPLY=()
        fi
        return
    fi
    _bgtask "$@"
}}
complete -F _bgtask_complete bgtask""", "bash")

zsh = script("zsh")
# The command and its arguments complete as a command line (zsh's idiom for sudo-like commands).
zsh = replace_once(zsh, "'*:command:'", "'*::command:_normal'", "zsh")

fish = script("fish") + f"""
# bgtask's own (scripts/completions.py): the command of run/submit completes as a command line of its own.
# The index of the command's first word on the line (the word being typed counts as the last), or nothing.
function __bgtask_command_start
    set -l words (commandline -opc)
    contains -- "$words[2]" run submit; or return 1
    set -l i 3
    while test $i -le (count $words)
        set -l w $words[$i]
        if test "$w" = "--"
            echo (math $i + 1); return 0
        else if contains -- "$w" {" ".join(valued)}
            set i (math $i + 2); continue
        else if not string match -q -- '-*' "$w"
            echo $i; return 0
        end
        set i (math $i + 1)
    end
    # The word being typed is the command when it is not an option nor an option's value.
    if test $i -eq (math (count $words) + 1); and not string match -q -- '-*' (commandline -ct)
        echo $i; return 0
    end
    return 1
end
function __bgtask_command_words
    set -l words (commandline -opc)
    set -l s (__bgtask_command_start); or return
    test $s -le (count $words); and printf '%s\n' $words[$s..-1]
    commandline -ct
end
complete -c bgtask -n __bgtask_command_start -f -a '(__fish_complete_subcommand --commandline (__bgtask_command_words))'
"""

for name, text in [("bgtask.bash", bash), ("_bgtask", zsh), ("bgtask.fish", fish)]:
    with open(f"{out}/{name}", "w") as f:
        f.write(text)
