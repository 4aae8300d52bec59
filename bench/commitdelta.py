#!/usr/bin/env python3
"""The product-line change of each non-merge commit in a git range, counted
by bench/srclines.py's rules over the files the commit touches:

    python3 bench/commitdelta.py 9c8e5d3..HEAD

One line a commit, oldest first: delta, hash, subject.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from srclines import count, is_product  # noqa: E402


def git(*args):
    return subprocess.run(['git', *args], capture_output=True, text=True, errors='replace')


def lines_at(rev, path):
    shown = git('show', f'{rev}:{path}')
    return count(shown.stdout) if shown.returncode == 0 else 0


def main():
    log = git('log', '--no-merges', '--reverse', '--format=%h %s', sys.argv[1]).stdout
    for entry in log.splitlines():
        commit, subject = entry.split(' ', 1)
        changed = git('diff', '--name-only', f'{commit}^', commit).stdout.split()
        delta = sum(lines_at(commit, p) - lines_at(f'{commit}^', p) for p in changed if is_product(p))
        print(f'{delta:+6d} {commit} {subject[:150]}')


if __name__ == '__main__':
    main()
