#!/usr/bin/python3
"""test_openapi.py - api/openapi.json against the server's source: the one
list of error codes (api/errors.h) and what the handlers send.

Checks, reading files only (no server: test_http checks that the served
document is this file, and contract.py checks every answer the API tests
receive against it):
  - Error.code's enum is exactly errors.h's codes, in its order, and
    x-ringmaster-status gives each exactly errors.h's status;
  - every rm__resp_error() call in api/*.c with a literal status and code
    sends a code on the list with that code's status (a code used with two
    statuses, or one missing from the list, fails here before any client
    sees it);
  - every operation documents the errors any request can get (400, 413,
    414, 431, 500, 501), every $ref resolves, and every documented error
    response is the JSON Error;
  - x-ringmaster-library-answers names a status and a reason for each entry.

usage: test_openapi.py [--ringmaster PATH]   (the binary is not needed)
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
import contract  # noqa: E402

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


def errors_h():
    src = open(os.path.join(ROOT, "api", "errors.h")).read()
    return [(c, int(s)) for c, s in re.findall(r"\bX\((\w+),\s*(\d+)\)", src)]


def sent_by_handlers():
    """(file, status, code) of every rm__resp_error call with literals."""
    out = []
    d = os.path.join(ROOT, "api")
    for name in sorted(os.listdir(d)):
        if not name.endswith(".c"):
            continue
        src = open(os.path.join(d, name)).read()
        for m in re.finditer(r"rm__resp_error\(\s*[^,]+,\s*(\d+)\s*,\s*\"(\w+)\"", src):
            out.append((name, int(m.group(1)), m.group(2)))
        # a code chosen at run time between literals: each must be listed
        for m in re.finditer(r"rm__resp_error\(\s*[^,]+,\s*(\d+)\s*,\s*[^\"][^,]*\?\s*\"(\w+)\"\s*:\s*\"(\w+)\"", src):
            out.append((name, int(m.group(1)), m.group(2)))
            out.append((name, int(m.group(1)), m.group(3)))
    return out


def main():
    listed = errors_h()
    check(len(listed) >= 10, f"errors.h lists only {len(listed)} codes")
    check(len({c for c, _ in listed}) == len(listed), "errors.h lists a code twice")
    c = contract.Contract()
    check(c.codes == [code for code, _ in listed],
          f"openapi Error.code enum {c.codes} != errors.h {[code for code, _ in listed]}")
    check(c.status_of == {code: s for code, s in listed},
          f"x-ringmaster-status {c.status_of} != errors.h {dict(listed)}")
    status_of = dict(listed)
    sent = sent_by_handlers()
    check(len(sent) >= 40, f"found only {len(sent)} rm__resp_error calls with literals")
    for f, st, code in sent:
        check(code in status_of, f"{f}: sends code {code!r}, not in errors.h")
        check(status_of.get(code) == st, f"{f}: sends {code} with {st}; errors.h says {status_of.get(code)}")
    used = {code for _, _, code in sent}
    # codes the HTTP layer sends through a variable (target.c's refusals,
    # the early answers of http.c) are looked for as literals in those files
    for code, _ in listed:
        if code in used:
            continue
        found = any('"%s"' % code in open(os.path.join(ROOT, "api", n)).read()
                    for n in os.listdir(os.path.join(ROOT, "api")) if n.endswith(".c"))
        check(found, f"errors.h lists {code}, which no api/*.c file sends")
    for p, item in c.doc["paths"].items():
        for m, op in item.items():
            if m not in contract.METHODS:
                continue
            rs = op["responses"]
            for s in ("400", "413", "414", "431", "500", "501"):
                check(s in rs, f"{m.upper()} {p}: does not document {s}")
            for s, r in rs.items():
                r = c._resolve(r)
                check(isinstance(r, dict) and "description" in r, f"{m.upper()} {p} {s}: unresolved")
                if s.isdigit() and int(s) >= 400:
                    sch = r.get("content", {}).get("application/json", {}).get("schema", {})
                    check(sch.get("$ref") == "#/components/schemas/Error",
                          f"{m.upper()} {p} {s}: not the JSON Error")
    blob = json.dumps(c.doc)
    for ref in set(re.findall(r'"\$ref": "([^"]+)"', blob)):
        try:
            c.resolver.resolve(ref)
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            check(False, f"$ref {ref} does not resolve: {e}")
    for a in c.doc.get("x-ringmaster-library-answers", []):
        check(a.get("when"), f"library answer without a reason: {a}")
    if FAILS:
        print(f"{len(FAILS)} check(s) failed", file=sys.stderr)
        return 1
    print(f"ok   {len(listed)} error codes, {len(sent)} literal answers in api/*.c, "
          f"{sum(1 for i in c.doc['paths'].values() for m in i if m in contract.METHODS)} operations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
