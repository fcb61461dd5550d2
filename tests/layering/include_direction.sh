#!/usr/bin/env bash
# The layering of docs/ARCHITECTURE.md, checked: every project include in server/ and client/ runs
# from a room to itself or to a room below it, never up. ROOMS lists each room (a folder, the
# longest matching one owns a file) with the rooms it may include. A file in no listed room, or an
# include of a room not in its list, fails the test with the file, the line and the rule.
set -euo pipefail
root="$1"
cd "$root"

# room                 may include (besides itself)
ROOMS='
server/common
server/placement       server/common
server/probe/host      server/common server/placement
server/probe/vendor    server/common server/placement server/probe/host
server/probe           server/common server/placement server/probe/host server/probe/vendor
server/export          server/common server/placement
server/metrics         server/common server/placement
server/logging         server/common
server/inventory       server/common
server/torch           server/common
server/service         server/common server/placement server/inventory server/logging server/metrics server/export
server/daemon          server/common server/placement server/inventory server/logging server/metrics server/export server/service
server                 server/common server/daemon
client/include         client/include
client                 client/include
client/python          client/include
client/cli             client/include client server/common server/placement server/probe/host server/probe/vendor server/probe server/export
'

room_of() {  # the longest listed room that is a prefix of the file's folder
  local dir="$1" best="" room
  while read -r room _; do
    [ -n "$room" ] || continue
    if [ "$dir" = "$room" ] || [[ "$dir" == "$room"/* ]]; then
      [ ${#room} -gt ${#best} ] && best="$room"
    fi
  done <<< "$ROOMS"
  printf '%s' "$best"
}

allowed() {  # room, included room
  local line
  [ "$1" = "$2" ] && return 0
  line=$(awk -v r="$1" '$1 == r' <<< "$ROOMS")
  for r in ${line#* }; do [ "$r" = "$2" ] && return 0; done
  return 1
}

bad=0
checked=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  room=$(room_of "$dir")
  if [ -z "$room" ]; then
    echo "$file: in no room of tests/layering/include_direction.sh (add its folder to ROOMS)"
    bad=1
    continue
  fi
  while IFS=: read -r lineno target; do
    [ -n "$target" ] || continue
    case "$target" in
      devplace/v1/*) continue ;;                 # generated from proto/: below everything
      devplace/*) target_dir=client/include ;;   # libdevplace's public headers
      *) target_dir=$(dirname "$target") ;;
    esac
    target_room=$(room_of "$target_dir")
    checked=$((checked + 1))
    if [ -z "$target_room" ] || ! allowed "$room" "$target_room"; then
      echo "$file:$lineno: includes \"$target\" ($target_room): $room may include only itself and:$(awk -v r="$room" '$1 == r {$1=""; print}' <<< "$ROOMS")"
      bad=1
    fi
  done < <(grep -nE '^\s*#\s*include\s+"(server|client|devplace)/' "$file" | sed -E 's/^([0-9]+):.*"([^"]+)".*/\1:\2/')
done < <(find server client -type f \( -name '*.h' -o -name '*.cc' \) | sort)

if [ "$bad" -ne 0 ]; then
  echo "includes that run up the layering (docs/ARCHITECTURE.md)"
  exit 1
fi
echo "every include runs down the layering: $checked project includes checked"
