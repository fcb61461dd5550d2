"""--boundaries (README.md): every release boundary of server/placement/versions.cc (each row's commits) looked
up among every release tag in the mirrors, patch releases included; the first tag holding any of a row's
commits must be the row's `since`. Writes tests/placement/version_boundaries.txt, which ctest holds the
table to; exit 1 when a row is wrong.
"""
import os
import subprocess

from common import ROOT, git, table_rows, vkey

BOUNDARIES = os.path.join(ROOT, "tests/placement/version_boundaries.txt")


def first_release(repo, commit, rel):
    """The releases that contain `commit` (`git tag --contains` for the tagged ones; a release that is
    a release commit rather than its tag, `git merge-base --is-ancestor`), and the first of them."""
    tags = set(git(repo, "tag", "--contains", commit).split())

    def contains(how, c):
        if how.startswith("tag "):
            return how.split()[1] in tags
        return subprocess.run(["git", "--git-dir", repo, "merge-base", "--is-ancestor", commit, c]).returncode == 0

    have = sorted((v for v, (c, how, _) in rel.items() if contains(how, c)), key=vkey)
    return (have[0] if have else None), have


def check_boundaries(a, tfr, accr):
    """A row's behaviour is in a release when the release contains any of the row's commits (a change that
    reached a patch release as a commit of its own on the release branch, and main through another, is two
    commits: V-ACC-XLA-CPU). The row's `since` must be the first such release, counting every release tag,
    patch releases included, and every later release must have one of them too."""
    repos = {"transformers": (a.transformers_git, tfr), "accelerate": (a.accelerate_git, accr)}
    lines, bad = [], 0
    for rid, lib, since, commits in table_rows():
        repo, rel = repos[lib]
        if not commits:
            print(f"{rid}: no commit recorded")
            bad += 1
            continue
        firsts, have_any = [], set()
        for c in commits:
            full = git(repo, "rev-parse", "--verify", "--quiet", c + "^{commit}").strip()
            if since in rel and rel[since][0] == full:  # the oldest row of an order: the release itself
                print(f"ok  {rid:<22} {lib:<12} {c} is the release commit of {since} ({rel[since][1]})")
                lines.append(f"{rid} {lib} {c} v{since}")
                firsts.append(since)
                have_any.update(v for v in rel if vkey(v) >= vkey(since))
                continue
            first, have = first_release(repo, full, rel)
            print(f"    {rid:<22} {lib:<12} {c} first release {first} ({rel[first][1] if first else '-'})")
            lines.append(f"{rid} {lib} {c} v{first}")
            if first:
                firsts.append(first)
            have_any.update(have)
        first = min(firsts, key=vkey) if firsts else None
        # Every later release must have the behaviour too (a patch release cut from main can hold a change
        # its successors on the release branch lack: that would not be one boundary).
        gaps = [v for v in rel if first and vkey(v) > vkey(first) and v not in have_any]
        ok = first == since and not gaps
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {rid:<22} {lib:<12} first release with one of its commits {first}; table "
              f"since {since}" + (f"; not in the later {', '.join(sorted(gaps, key=vkey))}" if gaps else ""))
    with open(BOUNDARIES, "w") as f:
        f.write("# (rule, library, commit, first release tag containing the commit) for every row of\n"
                "# server/placement/versions.cc, written by scripts/fidelity/run.py --boundaries from every release\n"
                "# tag of the libraries (patch releases included); a row's release is the first tag of any of its\n"
                "# commits. tests/placement/versions_test.cc holds the table to it.\n")
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} boundary commits, {bad} rows wrong; wrote {os.path.relpath(BOUNDARIES, ROOT)}")
    return 1 if bad else 0
