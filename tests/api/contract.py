"""contract.py - every answer an API test receives, checked against
api/openapi.json.

The tests' HTTP helpers (rmserver.Server.request, the raw-socket exchanges
of test_strict_http, rmtest's and rmdemo's requests) pass each answer to
check_answer(); an answer the document does not describe raises
ContractError, so the test fails where the answer came.

The rules, in the order they are applied:

  1. The request target's path is matched against the document's path
     templates ({id} matches one non-empty segment). HEAD is checked as GET
     without a body.
  2. A path that is not in the document:
       - outside /api/ and not an error: the dashboard's files, not part of
         the API: not checked further;
       - otherwise it must be an error answer (rule 5); a 2xx under /api/
         that the document does not know fails.
  3. A documented path with a method it does not have: 405
     method_not_allowed with an Allow header, or an error every operation
     can answer (400, 401, 413, 414, 431, 501).
  4. A documented operation: the status must be one of its responses; when
     the response declares content, the Content-Type (before ';') must be
     one of the declared types; a JSON body is validated against the
     declared schema (OpenAPI 3.0's nullable turned into JSON Schema's
     "null" type, $ref resolved in the document); an event stream's body is
     not read here (tests/api/test_sse*.py check the frames).
  5. Every 4xx/5xx answer is the JSON Error with application/json, its code
     is in Error.code's enum, and x-ringmaster-status gives its status.
  6. The one exception: the answers the HTTP library sends before the
     server sees a request (x-ringmaster-library-answers); a caller that
     sends such a request on purpose passes library=True, and then only a
     status on that list is accepted.

Debian's python3-jsonschema (scripts/setup installs it) does the schema
work; Draft 4 is the dialect OpenAPI 3.0's schema objects follow.
"""
import copy
import json
import os
import urllib.parse
import warnings

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
DOC_PATH = os.path.join(HERE, "..", "..", "api", "openapi.json")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# Errors any operation (and any path with a wrong method) may answer: the
# request's framing, not the operation, decides them.
ANY_OP = {400, 401, 413, 414, 431, 501}


class ContractError(AssertionError):
    pass


def _to_json_schema(node):
    """OpenAPI 3.0 schema objects -> JSON Schema (Draft 4): nullable
    becomes a "null" type (or an anyOf with it for a $ref)."""
    if isinstance(node, list):
        return [_to_json_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_json_schema(v) for k, v in node.items()}
    if out.pop("nullable", False):
        if "$ref" in out or "allOf" in out or "oneOf" in out or "anyOf" in out:
            return {"anyOf": [out, {"type": "null"}]}
        t = out.get("type")
        if isinstance(t, str):
            out["type"] = [t, "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = out["enum"] + [None]
    return out


class Contract:
    def __init__(self, path=DOC_PATH):
        with open(path) as f:
            self.doc = json.load(f)
        self.schema_root = _to_json_schema(copy.deepcopy(self.doc))
        self.resolver = jsonschema.RefResolver.from_schema(self.schema_root)
        err = self.doc["components"]["schemas"]["Error"]
        self.codes = err["properties"]["error"]["properties"]["code"]["enum"]
        self.status_of = err["x-ringmaster-status"]
        self.library = {a["status"] for a in self.doc.get("x-ringmaster-library-answers", [])}
        self.templates = []
        for p in self.doc["paths"]:
            self.templates.append((p, p.strip("/").split("/")))

    def match(self, path):
        segs = path.strip("/").split("/")
        for p, t in self.templates:
            if len(t) == len(segs) and all(
                    (a.startswith("{") and a.endswith("}") and b) or a == b for a, b in zip(t, segs)):
                return p
        return None

    def _resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            _, node = self.resolver.resolve(node["$ref"])
        return node

    def _validate(self, schema, value, what):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            v = jsonschema.Draft4Validator(_to_json_schema(schema), resolver=self.resolver)
            errs = sorted(v.iter_errors(value), key=lambda e: list(e.path))
        if errs:
            e = errs[0]
            raise ContractError("%s: %s at %s (body %.300s)" % (
                what, e.message, "/".join(str(x) for x in e.path) or "(top)", json.dumps(value)))

    def _error(self, status, ctype, body, what):
        if ctype != "application/json":
            raise ContractError("%s: error answer with Content-Type %r, not the JSON Error (body %.200r)"
                                % (what, ctype, body))
        try:
            j = json.loads(body) if isinstance(body, (bytes, str)) else body
        except ValueError:
            raise ContractError("%s: error body is not JSON: %.200r" % (what, body))
        self._validate({"$ref": "#/components/schemas/Error"}, j, what)
        code = j["error"]["code"]
        if self.status_of.get(code) != status:
            raise ContractError("%s: code %s comes with %s in the document, answered with %d"
                                % (what, code, self.status_of.get(code), status))

    def check_answer(self, method, target, status, headers, body, library=False):
        """Raise ContractError unless the answer is the document's.
        headers: dict with lower-case names; body: bytes, str or parsed
        JSON (None for HEAD)."""
        what = "%s %s -> %d" % (method, target[:120], status)
        if library and status in self.library:
            return
        if library and status not in self.library and status >= 400 and \
                headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise ContractError("%s: a library answer not in x-ringmaster-library-answers" % what)
        path = urllib.parse.urlsplit(target).path if not target.startswith("/") else target.split("?", 1)[0]
        ctype = headers.get("content-type", "").split(";")[0].strip()
        if status >= 400 and method != "HEAD":
            self._error(status, ctype, body, what)
        p = self.match(path)
        m = "get" if method == "HEAD" else method.lower()
        if p is None:
            if status >= 400 or not path.startswith("/api/"):
                return
            raise ContractError("%s: a %d for a path the document does not have" % (what, status))
        item = self.doc["paths"][p]
        if m not in item:
            if status == 405 and "allow" in headers:
                return
            if status in ANY_OP:
                return
            raise ContractError("%s: %s is not an operation of %s, and the answer is not 405 with Allow"
                                % (what, method, p))
        op = item[m]
        responses = op["responses"]
        r = responses.get(str(status)) or responses.get("default")
        if r is None:
            raise ContractError("%s: status %d is not documented for %s %s (documented: %s)"
                                % (what, status, method, p, ", ".join(sorted(responses))))
        r = self._resolve(r)
        content = r.get("content")
        if not content or method == "HEAD" or status == 304:
            return
        if ctype not in content:
            raise ContractError("%s: Content-Type %r, the document gives %s" % (what, ctype, sorted(content)))
        schema = content[ctype].get("schema")
        if schema is None or ctype == "text/event-stream":
            return
        if ctype == "application/json":
            try:
                value = json.loads(body) if isinstance(body, (bytes, str)) else body
            except ValueError:
                raise ContractError("%s: body is not JSON: %.200r" % (what, body))
        else:
            value = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        self._validate(schema, value, what)


_CONTRACT = None


def resolve(doc, schema):
    """schema with its $ref followed through doc (the OpenAPI document)
    until it is a schema of its own."""
    while "$ref" in schema:
        node = doc
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def check_answer(method, target, status, headers, body, library=False):
    """The module's one Contract (the document is read once)."""
    global _CONTRACT
    if _CONTRACT is None:
        _CONTRACT = Contract()
    _CONTRACT.check_answer(method, target, status, headers, body, library=library)
