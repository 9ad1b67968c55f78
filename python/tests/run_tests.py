"""Runs the package's unittest suites (python/tests/test_*.py) and, under `bazel test`, writes
a JUnit XML report to $XML_OUTPUT_FILE so that every test case is counted, not just the target.

    PYTHONPATH=python python3 python/tests/run_tests.py [-v]
"""

import os
import sys
import time
import unittest
import xml.etree.ElementTree as ET


class RecordingResult(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []  # (test id, seconds, outcome, detail)
        self._start = 0.0

    def startTest(self, test):
        self._start = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        self.cases.append((test.id(), time.monotonic() - self._start, outcome, detail))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", self.failures[-1][1])

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self.errors[-1][1])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failure", "unexpected success")


def write_junit(path, cases, seconds):
    suite = ET.Element("testsuite", name="kvoffload-python", tests=str(len(cases)),
                       failures=str(sum(c[2] == "failure" for c in cases)),
                       errors=str(sum(c[2] == "error" for c in cases)),
                       skipped=str(sum(c[2] == "skipped" for c in cases)),
                       time="%.3f" % seconds)
    for test_id, secs, outcome, detail in cases:
        module_class, _, name = test_id.rpartition(".")
        case = ET.SubElement(suite, "testcase", classname=module_class, name=name,
                             time="%.3f" % secs)
        if outcome in ("failure", "error", "skipped"):
            child = ET.SubElement(case, outcome, message=detail.splitlines()[-1] if detail else "")
            child.text = detail
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    verbosity = 2 if "-v" in sys.argv else 1
    suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py", top_level_dir=here)
    runner = unittest.TextTestRunner(verbosity=verbosity, resultclass=RecordingResult)
    start = time.monotonic()
    result = runner.run(suite)
    if os.environ.get("XML_OUTPUT_FILE"):
        write_junit(os.environ["XML_OUTPUT_FILE"], result.cases, time.monotonic() - start)
    passed = sum(c[2] == "passed" for c in result.cases)
    failed = sum(c[2] in ("failure", "error") for c in result.cases)
    skipped = sum(c[2] == "skipped" for c in result.cases)
    print("python: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 0 if result.wasSuccessful() and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
