#!/usr/bin/env bash
# The man pages and the bash completion as `cmake --install` lays them out (the .deb has the same
# files under /usr; deb_test.sh checks they are there).
#   man:        every page renders with `man -l`, with its NAME line, the binary's version and its
#               flags (help2man's text, devplace's per-command sections)
#   completion: the installed script loads in a plain bash and through bash-completion's own loader
#               (found by its install path), and completes a command, a subcommand, a flag and the
#               device_map keywords from the installed binary's --help
# Usage: man_completion_test.sh man|completion <build dir> <cmake> <with torch: ON|OFF>
set -euo pipefail
what="$1" build="$2" cmake="$3" with_torch="$4"
tmp=$(mktemp -d /tmp/devplace-man-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
prefix="$tmp/prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
version=$("$prefix/bin/devplace" --version | awk '{print $2}')

if [ "$what" = man ]; then
  command -v help2man >/dev/null || fail "help2man is not installed (scripts/setup installs it); no man pages were built"
  pages=(man1/devplace.1.gz man8/devplaced.8.gz man8/devplace-probe.8.gz)
  [ "$with_torch" = ON ] && pages+=(man8/devplace-torch-probe.8.gz)
  installed=$(cd "$prefix/share/man" && find . -type f | sed 's|^\./||' | sort)
  [ "$installed" = "$(printf '%s\n' "${pages[@]}" | sort)" ] || fail "installed man pages: $installed; want ${pages[*]}"
  # page, then strings its rendering must hold: the NAME line and flags only the binary's --help has
  check() {
    local page="$1" text
    shift
    text=$(MANWIDTH=100 man --nh --nj -l "$prefix/share/man/$page" 2>"$tmp/man.err") || { cat "$tmp/man.err"; fail "man -l $page"; }
    [ -s "$tmp/man.err" ] && { cat "$tmp/man.err"; fail "man -l $page wrote warnings"; }
    local want
    for want in "$@"; do
      grep -qF -- "$want" <<<"$text" || { echo "$text" | head -40; fail "man -l $page: no \"$want\""; }
    done
    echo "ok: man -l $page: $(wc -l <<<"$text") lines, has: $*"
  }
  check man1/devplace.1.gz "devplace - which device a PyTorch job should use" "devplace $version" \
    "--address=VALUE" "COMMANDS" "--device_map=VALUE" "balanced_low_0" "slurm task-prolog" "--step_numbering" \
    "SEE ALSO" "devplaced(8)"
  # `devplace --help`'s command list: every name, two-word ones too, is a term of its own (help2man
  # ran "slurm gres Print ... slurm task-prolog Slurm ..." into one paragraph while the names
  # overflowed their column).
  commands=$(MANWIDTH=100 man --nh --nj -l "$prefix/share/man/man1/devplace.1.gz" 2>/dev/null |
             awk '/^ +Commands:$/ {on = 1; next} on && /^ +Global flags/ {exit} on')
  for name in resolve fleet "slurm gres" "slurm task-prolog" "slurm health-check" version; do
    grep -qE "^ +$name( +[A-Z].*)?\$" <<<"$commands" || { echo "$commands"; fail "man devplace: \"$name\" is not a term of the command list"; }
  done
  if grep -qE '\. +(slurm|version) ' <<<"$commands"; then echo "$commands"; fail "man devplace: command names run into a paragraph"; fi
  echo "ok: man devplace lists each command as a term"
  check man8/devplaced.8.gz "devplaced - the devplace daemon" "devplaced $version" "--listen" "--tls_client_ca" \
    "--max_receive_bytes" "(default:" "devplace(1)"
  check man8/devplace-probe.8.gz "devplace-probe - probe this host" "devplace-probe $version" "--host_root" "--nvml_library"
  [ "$with_torch" = ON ] && check man8/devplace-torch-probe.8.gz "devplace-torch-probe - report" "devplace-torch-probe $version"
  exit 0
fi

[ "$what" = completion ] || fail "usage: man_completion_test.sh man|completion ..."
script="$prefix/share/bash-completion/completions/devplace"
[ -f "$script" ] || fail "share/bash-completion/completions/devplace is not installed"
# complete LINE: COMPREPLY after <TAB> at the end of LINE, as bash fills COMP_* (words split at '=' and ':').
cat >"$tmp/complete.sh" <<'DRIVER'
complete_line() {
  COMP_LINE="$1" COMP_POINT=${#1}
  local split="${1//=/ = }"
  read -r -a COMP_WORDS <<<"${split//:/ : }"
  [[ "$1" == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  "$(complete -p devplace | sed -E 's/.*-F ([^ ]+) .*/\1/')" devplace "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]:-}"
  echo "${COMPREPLY[*]}"
}
DRIVER
expect() {  # how the script is loaded, LINE, the replies wanted
  local load="$1" line="$2" want="$3" got
  got=$(PATH="$prefix/bin:/usr/bin:/bin" XDG_DATA_DIRS="$prefix/share" BASH_COMPLETION_USER_DIR="$tmp/none" \
        bash --norc --noprofile -c "$load; . '$tmp/complete.sh'; complete_line '$line'") || fail "bash: $load"
  [ "$got" = "$want" ] || fail "[$line] completes to \"$got\", want \"$want\" ($load)"
  echo "ok: [$line<TAB>] -> $got"
}
plain=". '$script'"
expect "$plain" "devplace res" "resolve"
expect "$plain" "devplace inv" "inventory"
expect "$plain" "devplace slurm " "gres health-check task-prolog"
expect "$plain" "devplace help wa" "watch"
expect "$plain" "devplace resolve --work" "--workload="
expect "$plain" "devplace resolve --workload=inf" "inference"
expect "$plain" "devplace resolve --device_m" "--device_map="
expect "$plain" "devplace resolve --device_map=bal" "balanced balanced_low_0"
expect "$plain" "devplace resolve --device-map=seq" "sequential"
expect "$plain" "devplace slurm task-prolog --step" "--step_numbering="
expect "$plain" "devplace --tls_c" "--tls_ca= --tls_cert="
# bash-completion (Debian's package) finds the script by its installed path and loads it on demand.
loader=/usr/share/bash-completion/bash_completion
[ -f "$loader" ] || fail "$loader is missing (scripts/setup installs bash-completion)"
expect ". $loader; __load_completion devplace" "devplace he" "health help"
expect ". $loader; __load_completion devplace" "devplace fleet --res" "--resolve"
