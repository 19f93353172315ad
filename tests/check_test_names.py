#!/usr/bin/env python3
"""Catch test names CTest can run (tests/CMakeLists.txt: catch_discover_tests, one CTest test
per case). CMake splits a name at ';' into two tests that match no case, and the name is passed
back to Catch as a filter, where a leading '[' reads as a tag and a leading '-' as an option.
Prints every such TEST_CASE (file:line, the name) and exits 1 if any.
  python3 tests/check_test_names.py SOURCE_DIR
"""
import pathlib
import re
import sys

NAME = re.compile(r'TEST_CASE\(\s*"((?:[^"\\]|\\.)*)"')

def problem(name: str) -> str:
    if ";" in name:
        return "';' splits it into two CTest tests"
    if name.startswith("["):
        return "a leading '[' is read as a tag"
    if name.startswith("-"):
        return "a leading '-' is read as an option"
    return ""

def main(root: pathlib.Path) -> int:
    bad, checked = [], 0
    for path in sorted((root / "tests").glob("*.cpp")):
        text = path.read_text(encoding="utf-8")
        for m in NAME.finditer(text):
            checked += 1
            why = problem(m.group(1))
            if why:
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{path.relative_to(root)}:{line}: \"{m.group(1)}\": {why}")
    for b in bad:
        print(b)
    print(f"{checked} test names checked, {len(bad)} that CTest cannot run")
    return 1 if bad or checked == 0 else 0

if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
