"""--crosscheck=GIT_DIR: each matrix release of Transformers against an independent fork with main's history
(no tags), so that a mirror's release tags are not taken on trust (exit 1 on a mismatch).
"""
import os
import subprocess

from common import git, last_patches


CROSSCHECK_FILES = ["src/transformers/training_args.py", "src/transformers/pipelines/base.py",
                    "src/transformers/utils/import_utils.py"]


def crosscheck(repo, other, rel):
    """Each matrix release of Transformers against an independent fork with main's history (no tags):
    the main commit its release branch was cut from must be in the fork, and the files that decide a
    device must be the same there unless a commit on the release branch changed them."""
    bad = 0
    for v in last_patches(rel, "transformers"):
        commit = rel[v][0]
        cut, n = None, 0
        for c in git(repo, "rev-list", "--first-parent", "-n", "400", commit).split():
            if subprocess.run(["git", "--git-dir", other, "cat-file", "-e", c + "^{commit}"],
                              capture_output=True).returncode == 0:
                cut = c
                break
            n += 1
        if cut is None:
            print(f"{v}: no ancestor within 400 commits is in {other}")
            bad += 1
            continue
        changed = set(git(repo, "diff", "--name-only", cut, commit, "--", *CROSSCHECK_FILES).split())
        same = []
        for f in CROSSCHECK_FILES:
            a = git(repo, "rev-parse", f"{commit}:{f}").strip()
            b = subprocess.run(["git", "--git-dir", other, "rev-parse", f"{cut}:{f}"], capture_output=True,
                               text=True).stdout.strip()
            same.append(f"{os.path.basename(f)} {'same' if a == b else 'changed on the branch' if f in changed else 'DIFFERS'}")
            bad += a != b and f not in changed
        print(f"{v} ({rel[v][1]}): {n} commits on its release branch, cut from {cut[:10]} (in the fork); "
              + ", ".join(same))
    return 1 if bad else 0
