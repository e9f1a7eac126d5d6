#!/usr/bin/env python3
"""Reads one librdkafka test-runner log and prints each named test's result, one line each:

    NAME|PASSED|FAILED|SKIPPED|NONE|seconds|why

The runner's summary table is not enough: after a failure the runner usually aborts (its
<MAIN> check finds librdkafka threads still running) before printing it. So the per-test lines
are read: `Test NAME PASSED`, `### Test "NAME (subtest)" failed at file:line:func() ...`
followed by the assertion, `SKIPPING TEST: why`, then the summary rows if there are any.
The <MAIN> pseudo-test is reported too when it failed (e.g. threads left behind).

Usage: runner_result.py LOG NAME...
"""
import re
import sys

ANSI = re.compile(r"\x1b(\[[0-9;]*[A-Za-z]|\(B)")
PREFIX = re.compile(r"^\[(\S+)\s*/\s*([0-9.]+)s\] ?(.*)$")
FAILED_AT = re.compile(r'^### Test "([^" (]+)(?: \(([^"]*)\))?" failed at (\S+?)\(\) at [^#]*###\s*$')
CLIENT_ERR = re.compile(r"^%[0-3]\|[0-9.]+\|[A-Z_]+\|([^#|]+)#[^|]*\| (?:\[thrd:[^\]]*\]: )?(.*)$")
ROW = re.compile(r"^\|\s*(\S+)\s*\|\s*([A-Z]+)\s*\|\s*([0-9.]+)s\s*\|\s*(.*)$")


def shorten(text, limit=700):
    # Long runs of one character (librdkafka's 255-byte topic names) as `aaaa…(N)`.
    text = re.sub(r"(.)\1{15,}", lambda m: m.group(1) * 4 + "…(%d)" % len(m.group(0)), text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def main():
    log, names = sys.argv[1], sys.argv[2:]
    with open(log, errors="replace") as f:
        lines = [ANSI.sub("", l.rstrip("\n")) for l in f]

    last_time = {}  # name -> last seconds printed in its prefix
    passed, failed, skipped, fail_why, skip_why, rows = set(), set(), set(), {}, {}, {}
    started = set()  # names with a `Running test` line
    more_why = {}  # name -> failures of later sub-tests
    client_err = {}  # name -> first error its librdkafka clients logged (%0..%3 lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        m = PREFIX.match(line)
        if m:
            name, secs, rest = m.group(1), float(m.group(2)), m.group(3)
            last_time[name] = secs
            if re.match(r"=+ Running test (\S+) =+", rest):
                started.add(name)
            t = re.match(r"=+ Test (\S+) (PASSED|FAILED|SKIPPED) =+", rest)
            if t:
                {"PASSED": passed, "FAILED": failed, "SKIPPED": skipped}[t.group(2)].add(t.group(1))
            s = re.match(r"SKIPPING TEST: (.*)", rest)
            if s and name not in skip_why:
                skip_why[name] = s.group(1)
        m = FAILED_AT.match(line)
        if m:
            name, sub, where = m.group(1), m.group(2), m.group(3)
            # The assertion, and the lines it printed after it (e.g. 0099's two offset lists).
            msg, j = (lines[i + 1] if i + 1 < len(lines) else ""), i + 2
            while j < len(lines) and j < i + 5 and lines[j].strip() and lines[j][0] not in "[%#|=":
                msg += " / " + lines[j].strip()
                j += 1
            failed.add(name)
            why = "%s%s: %s" % ("[%s] " % sub if sub else "", where, msg)
            if name not in fail_why:
                fail_why[name] = why
            elif sub and all(("[%s]" % sub) not in w for w in [fail_why[name]] + more_why.get(name, [])):
                more_why.setdefault(name, []).append(why)  # a later sub-test failed too
        m = CLIENT_ERR.match(line)
        if m and m.group(1) not in client_err:
            client_err[m.group(1)] = m.group(2)
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = (m.group(2), float(m.group(3)), m.group(4))
        i += 1

    def result(name):
        secs = last_time.get(name, 0.0)
        row = rows.get(name)
        if name in failed or (row and row[0] == "FAILED"):
            why = fail_why.get(name) or (row[2] if row else "") or "failed"
            # A timeout says little: the first error a client of the test logged says more.
            if "timed out" in why.lower() and name in client_err:
                why += " [first client error: %s]" % client_err[name]
            for other in more_why.get(name, [])[:2]:
                why += " || then " + shorten(other, 250)
            if len(more_why.get(name, [])) > 2:
                why += " || and %d more" % (len(more_why[name]) - 2)
            return "FAILED", secs, why
        if name in passed or (row and row[0] == "PASSED"):
            return "PASSED", row[1] if row else secs, ""
        if name in skipped or (row and row[0] == "SKIPPED"):
            return "SKIPPED", secs, skip_why.get(name) or (row[2] if row else "") or "skipped"
        if row and row[0] == "RUNNING":
            return "NONE", secs, "still running when the runner stopped"
        return "NONE", secs, "started, no result" if name in started else ""

    for name in names + ["<MAIN>"]:
        state, secs, why = result(name)
        if name == "<MAIN>" and state != "FAILED":
            continue
        print("%s|%s|%.1f|%s" % (name, state, secs, shorten(why)))
    # Other entries the runner ran (not asked for): said on stderr by the caller.
    for name in sorted((passed | failed) - set(names) - {"<MAIN>"}):
        print("%s|OTHER|0|%s" % (name, "PASSED" if name in passed and name not in failed else "FAILED"))


if __name__ == "__main__":
    main()
