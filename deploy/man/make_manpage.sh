#!/usr/bin/env bash
# Writes one man page from a binary's --help and --version with Debian's help2man, gzipped as
# Debian installs man pages. For `devplace`, each command's and subcommand's own --help becomes a
# COMMANDS section, so the page has every flag.
# Usage: make_manpage.sh <help2man> <binary> <section> <one-line description> <output.gz>
set -euo pipefail
help2man="$1" binary="$2" section="$3" description="$4" out="$5"
name=$(basename "$binary")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

include="$tmp/include.h2m"
{
  echo "[SEE ALSO]"
  case "$name" in
    devplace) echo ".BR devplaced (8)" ;;
    *) echo ".BR devplace (1), .BR devplaced (8)" ;;
  esac
  echo ".PP"
  echo "The guides: /usr/share/doc/devplace/README.md and, beside it, docs/CLIENT.md (the CLI and Python jobs),"
  echo "docs/OPERATOR.md (running the daemon: flags, TLS, metrics, logs), docs/SEMANTICS.md (the rules)."
} >"$include"

roff_block() {  # text on stdin as a preformatted roff block (backslashes and leading dots escaped)
  echo ".nf"
  sed -e 's/\\/\\e/g' -e 's/^\([.'"'"']\)/\\\&\1/'
  echo ".fi"
}

if [ "$name" = devplace ]; then
  {
    echo "[COMMANDS]"
    # The commands of `devplace --help` ("Commands:" up to the first blank line), first word each.
    for command in $("$binary" --help | awk '/^Commands:/ {on = 1; next} on && /^$/ {exit} on && /^  [a-z]/ {print $1}' |
                     awk '!seen[$0]++'); do
      echo ".SS $command"
      "$binary" "$command" --help | roff_block
      # Two-word commands list their subcommands as "  devplace CMD SUB ..." lines.
      for sub in $("$binary" "$command" --help | awk -v c="$command" '$1 == "devplace" && $2 == c && $3 ~ /^[a-z]/ {print $3}' |
                   awk '!seen[$0]++'); do
        echo ".SS $command $sub"
        "$binary" "$command" "$sub" --help | roff_block
      done
    done
  } >>"$include"
fi

# absl's --help (devplaced, the probes) prints each flag as "    --name (text wrapped over lines);
# default: x;": help2man reads a flag list as "--name" lines with indented text, so the help is
# read through a wrapper that reflows it so.
# help2man runs the program through the shell unquoted, so it always gets "$tmp/$name" (a checkout
# may live at a path with a space): the binary itself, linked, or that wrapper.
run="$tmp/$name"
help=$("$binary" --help 2>&1 || true)  # devplaced's and the probes' --help exit 0 (absl's own exited 1)
if ! grep -q '^  Flags from ' <<<"$help"; then
  ln -s "$binary" "$run"
else
  cat >"$run" <<WRAPPER
#!/usr/bin/env bash
if [ "\$1" != --help ]; then exec "$binary" "\$@"; fi
"$binary" --help 2>&1 | awk '
  function flush() { if (flag != "") { print "  " flag; print "      " text; print "" } flag = ""; text = "" }
  /^    --[a-z]/ { flush(); line = \$0; sub(/^ +/, "", line); i = index(line, " ("); flag = substr(line, 1, i - 1)
                  text = substr(line, i + 2); next }
  flag != "" && /^      / { line = \$0; sub(/^ +/, "", line); text = text " " line; next }
  { flush(); if (\$0 !~ /^  Flags from /) print }
  END { flush() }' | sed -E 's/\); default: (.*);\$/ (default: \1)/'
WRAPPER
  chmod +x "$run"
fi
"$help2man" --no-info --no-discard-stderr --section="$section" --name="$description" \
  --include="$include" --output="$tmp/$name.$section" "$run"
gzip -9nc "$tmp/$name.$section" >"$out"
