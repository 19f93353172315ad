#!/usr/bin/env python3
"""The layering rule (docs/architecture.md): a folder is a layer and no include goes upward.

Each folder has a rank; a file may include project headers of its own folder or of a folder
of strictly lower rank. Prints every violation (file:line, the include) and exits 1 if any.
  python3 tests/check_layers.py SOURCE_DIR
"""
import pathlib
import re
import sys

RANK = {"base": 0, "kv": 1, "sampling": 1, "verify": 1, "text": 1, "model": 2, "engine": 3, "draft": 4,
        "runtime": 5, "experiments": 6, "server": 7, "python": 7,
        "cli": 8}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')

def main(root: pathlib.Path) -> int:
    violations, checked = [], 0
    for folder, rank in RANK.items():
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".h", ".cpp", ".cu", ".cuh"):
                continue
            checked += 1
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m or m.group(1) == folder or m.group(1) not in RANK:
                    continue
                if RANK[m.group(1)] >= rank:
                    violations.append(f"{path.relative_to(root)}:{number}: {folder} includes {line.strip()}")
    for v in violations:
        print(v)
    print(f"layers: {checked} files checked, {len(violations)} upward includes")
    return 1 if violations or checked == 0 else 0

if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1])))
