"""--newer: the release tags in the mirrors newer than the newest release server/placement/versions.cc knows
(exit 1 when there are any).
"""
import datetime
import re

from common import VERSIONS_CC, vkey


def newest_known():
    with open(VERSIONS_CC) as f:
        m = re.search(r"Version NewestVersion\(Library lib\) \{ return lib == Library::kTransformers \? "
                      r"Version\{(\d+), (\d+), (\d+)\} : Version\{(\d+), (\d+), (\d+)\}", f.read())
    return {"transformers": m.group(1, 2, 3), "accelerate": m.group(4, 5, 6)}


def list_newer(tfr, accr):
    newest = newest_known()
    count = 0
    for lib, rel in (("transformers", tfr), ("accelerate", accr)):
        known = tuple(int(x) for x in newest[lib])
        newer = sorted((v for v in rel if vkey(v) > known), key=vkey)
        print(f"{lib}: the table knows up to {'.'.join(newest[lib])}; newer release tags in the mirror: "
              f"{', '.join(f'{v} ({datetime.date.fromtimestamp(rel[v][2])})' for v in newer) or 'none'}")
        count += len(newer)
    return 1 if count else 0
