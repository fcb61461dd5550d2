#!/usr/bin/env python3
"""The layering of docs/ARCHITECTURE.md, checked: every project include in server/ and client/
runs from a room to itself or to a room below it, never up.

ROOMS maps each room (a folder, holding the files directly in it; `client/include` holds its
subfolders too) to the rooms it may include besides itself. A file in no listed room (a new
folder must be added here and to docs/ARCHITECTURE.md), or an include of a room not in its list,
fails the test with the file, the line and the rule. Usage: include_direction.py SOURCE_DIR
"""
import os
import re
import sys

ROOMS = {
    "server/common": [],
    "server/placement": ["server/common"],
    "server/probe/host": ["server/common", "server/placement"],
    "server/probe/vendor_libs": ["server/common", "server/placement", "server/probe/host"],
    "server/probe": ["server/common", "server/placement", "server/probe/host", "server/probe/vendor_libs"],
    "server/export": ["server/common", "server/placement"],
    "server/metrics": ["server/common", "server/placement"],
    "server/logging": ["server/common"],
    "server/inventory": ["server/common"],
    "server/torch": ["server/common"],
    "server/service": ["server/common", "server/placement", "server/inventory", "server/logging",
                       "server/metrics", "server/export"],
    "server/daemon": ["server/common", "server/placement", "server/inventory", "server/logging",
                      "server/metrics", "server/export", "server/service"],
    "server": ["server/common", "server/daemon"],  # devplaced.cc: main only
    "client/include": [],  # libdevplace's public headers (#include "devplace/...")
    "client/common": [],  # the clients' bounded reader, compiled into libdevplace (not installed)
    "client": ["client/include", "client/common"],
    "client/python": ["client/include"],
    "client/cli": ["client/include", "client/common", "server/common", "server/placement", "server/probe/host",
                   "server/probe/vendor_libs", "server/probe", "server/export"],
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:server|client|devplace)/[^"]+)"')


def room_of(folder):
    if folder == "client/include" or folder.startswith("client/include/"):
        return "client/include"
    return folder if folder in ROOMS else None


def main():
    os.chdir(sys.argv[1])
    errors, checked = [], 0
    for top in ("server", "client"):
        for folder, _, files in sorted(os.walk(top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(folder, name)
                room = room_of(folder)
                if room is None:
                    errors.append(f"{path}: in no room of tests/layering/include_direction.py (add its folder to ROOMS)")
                    continue
                with open(path, encoding="utf-8") as source:
                    for number, line in enumerate(source, 1):
                        match = INCLUDE.match(line)
                        if not match:
                            continue
                        target = match.group(1)
                        if target.startswith("devplace/v1/"):
                            continue  # generated from proto/: below everything
                        target_room = "client/include" if target.startswith("devplace/") else room_of(
                            os.path.dirname(target))
                        checked += 1
                        if target_room != room and target_room not in ROOMS[room]:
                            errors.append(f"{path}:{number}: includes \"{target}\" ({target_room}): {room} may "
                                          f"include only itself and: {' '.join(ROOMS[room]) or 'nothing'}")
    if errors:
        print("\n".join(errors))
        print("includes that run up the layering (docs/ARCHITECTURE.md)")
        return 1
    print(f"every include runs down the layering: {checked} project includes checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
