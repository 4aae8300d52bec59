#!/usr/bin/env python3
"""Product lines of the workspace: non-blank, non-comment lines in
crates/*/src, outside `#[cfg(test)] mod x { ... }` blocks (with any other
attributes between) and outside files named tests.rs or under a tests/
directory of src/. Per crate, and the total; --files lists the 60 largest.

    python3 bench/srclines.py [ROOT] [--files]

Issue 22's "net lines in src/" is measured with it (bench/HISTORY.md).
"""
import collections
import os
import re
import sys


def count(text):
    """The product lines of one file's text."""
    n = 0
    skip_until = None
    pending_test = False
    in_block = False
    for line in text.splitlines():
        s = line.strip()
        if skip_until is not None:
            if line == skip_until:
                skip_until = None
            continue
        if in_block:
            in_block = '*/' not in s
            continue
        if not s or s.startswith('//'):
            continue
        if s.startswith('/*'):
            in_block = '*/' not in s
            continue
        if s == '#[cfg(test)]':
            pending_test = True
            continue
        if pending_test and s.startswith('#['):
            continue
        if pending_test:
            pending_test = False
            m = re.match(r'^(\s*)(pub(\(crate\))? )?mod \w+ \{$', line)
            if m:
                skip_until = m.group(1) + '}'
                continue
        n += 1
    return n


def is_product(path):
    """Whether a repository path is a product source file."""
    m = re.match(r'crates/[^/]+/src/(.*)\.rs$', path)
    return bool(m) and not path.endswith('/tests.rs') and not m.group(1).startswith('tests/') \
        and '/tests/' not in m.group(1)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    root = args[0] if args else '.'
    totals = collections.Counter()
    files = {}
    for crate in sorted(os.listdir(os.path.join(root, 'crates'))):
        for dirpath, _, names in os.walk(os.path.join(root, 'crates', crate, 'src')):
            for name in names:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if is_product(rel):
                    with open(path, encoding='utf-8', errors='replace') as f:
                        files[rel] = count(f.read())
                    totals[crate] += files[rel]
    for crate, n in sorted(totals.items(), key=lambda x: -x[1]):
        print(f'{n:7d} {crate}')
    print(f'{sum(totals.values()):7d} total')
    if '--files' in sys.argv:
        for rel, n in sorted(files.items(), key=lambda x: -x[1])[:60]:
            print(f'{n:6d} {rel}')


if __name__ == '__main__':
    main()
