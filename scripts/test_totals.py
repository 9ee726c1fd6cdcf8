"""Add up the JUnit XML reports of scripts/test's two pytest runs into one closing line:
``total: N passed, N failed, N skipped`` (errors count as failed). A report that is missing
(its run ended before writing it, e.g. stopped by the memory guard) is named, and counts as failed."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def totals(paths: list[str]) -> tuple[int, int, int, list[str]]:
    passed = failed = skipped = 0
    missing = []
    for path in paths:
        if not Path(path).is_file():
            missing.append(path)
            continue
        root = ET.parse(path).getroot()
        for suite in root.iter("testsuite"):
            tests, errors = int(suite.get("tests", 0)), int(suite.get("errors", 0))
            fails, skips = int(suite.get("failures", 0)), int(suite.get("skipped", 0))
            passed += tests - errors - fails - skips
            failed += errors + fails
            skipped += skips
    return passed, failed, skipped, missing


def main(paths: list[str]) -> int:
    passed, failed, skipped, missing = totals(paths)
    for path in missing:
        print(f"scripts/test: no report from one run ({Path(path).name}): it ended before writing it")
    print(f"total: {passed} passed, {failed + len(missing)} failed, {skipped} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
