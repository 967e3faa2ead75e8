#!/usr/bin/env python3
"""schema_cases.py — the JSON Schemas the structured-output tests use (structured_test.py against
the server, schema_walks_test.py against the grammar compiler) and `valid`, the validator of the
subset the server accepts: strict (every keyword it meets must be one it knows; formats checked
with datetime / uuid / re) and, when installed, the `jsonschema` package (its format checker)."""
import datetime
import ipaddress
import re
import uuid

from server_suite import Fail, check

KNOWN = {"type", "properties", "required", "enum", "const", "items", "additionalProperties", "anyOf", "oneOf",
         "minItems", "maxItems", "title", "description", "pattern", "format", "minLength", "maxLength", "minimum",
         "maximum", "exclusiveMinimum", "exclusiveMaximum", "$ref", "$defs", "definitions"}
try:
    import jsonschema
except ImportError:
    jsonschema = None


def _time(x):
    m = re.fullmatch(r"(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", x)
    check(m is not None, f"time {x!r}")
    datetime.time.fromisoformat(x[:8])
    if m.group(5) != "Z":
        check(int(m.group(5)[1:3]) < 24 and int(m.group(5)[4:]) < 60, f"time offset {x!r}")


FORMATS = {
    "date": lambda x: datetime.date.fromisoformat(x) and check(len(x) == 10, f"date {x!r}"),
    "time": _time,
    "date-time": lambda x: (check("T" in x, f"date-time {x!r}"), FORMATS["date"](x.split("T")[0]), _time(x.split("T")[1])),
    "uuid": lambda x: check(str(uuid.UUID(x)) == x, f"uuid {x!r}"),
    "email": lambda x: check(re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", x) is not None, f"email {x!r}"),
    "ipv4": lambda x: ipaddress.IPv4Address(x),
}


def valid(v, s, path="$", root=None):
    """Raises Fail unless v is valid under schema s (the supported subset)."""
    if root is None:
        root = s
        if jsonschema is not None:
            try:
                # the 2020-12 draft's checker: FormatChecker() merges every draft's and draft 3's
                # "time" (hh:mm:ss, no offset) wins there, refusing RFC 3339 times
                jsonschema.validate(v, s, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            except jsonschema.ValidationError as e:
                raise Fail(f"jsonschema: {e.message}")
    if s is True or s == {}:
        return
    check(set(s) <= KNOWN, f"validator: unknown keywords {set(s) - KNOWN}")
    if "$ref" in s:
        t = root
        for seg in s["$ref"].lstrip("#").split("/")[1:]:
            t = t[seg]
        return valid(v, t, path, root)
    if isinstance(v, str):
        check(len(v) >= s.get("minLength", 0) and len(v) <= s.get("maxLength", 10 ** 9), f"{path}: length of {v!r}")
        if "pattern" in s:
            check(re.search(s["pattern"], v) is not None, f"{path}: {v!r} !~ {s['pattern']}")
        if "format" in s:
            try:
                FORMATS[s["format"]](v)
            except ValueError as e:
                raise Fail(f"{path}: {v!r} is not a {s['format']}: {e}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        check(v >= s.get("minimum", -1e300) and v <= s.get("maximum", 1e300), f"{path}: {v} outside bounds")
        check(v > s.get("exclusiveMinimum", -1e300) and v < s.get("exclusiveMaximum", 1e300), f"{path}: {v} outside bounds")
    if "const" in s:
        check(v == s["const"] and type(v) is type(s["const"]), f"{path}: {v!r} != const {s['const']!r}")
    if "enum" in s:
        check(any(v == e and type(v) is type(e) for e in s["enum"]), f"{path}: {v!r} not in {s['enum']}")
    for k in ("anyOf", "oneOf"):
        if k in s:
            ok = 0
            for sub in s[k]:
                try:
                    valid(v, sub, path, root)
                    ok += 1
                except Fail:
                    pass
            check(ok >= 1, f"{path}: {v!r} matches no branch of {k}")
    t = s.get("type")
    if t is not None:
        ts = t if isinstance(t, list) else [t]
        tn = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
        def is_t(x):
            if x == "integer":
                return isinstance(v, int) and not isinstance(v, bool)
            if x == "number":
                return isinstance(v, (int, float)) and not isinstance(v, bool)
            return isinstance(v, tn[x])
        check(any(is_t(x) for x in ts), f"{path}: {v!r} is not {t}")
    if isinstance(v, dict):
        props = s.get("properties", {})
        for r in s.get("required", []):
            check(r in v, f"{path}: required {r!r} missing in {v}")
        for k, x in v.items():
            if k in props:
                valid(x, props[k], f"{path}.{k}", root)
            else:
                check(s.get("additionalProperties", True) is not False, f"{path}: extra property {k!r}")
    if isinstance(v, list):
        check(len(v) >= s.get("minItems", 0), f"{path}: {len(v)} items < minItems")
        check(len(v) <= s.get("maxItems", 10 ** 9), f"{path}: {len(v)} items > maxItems")
        for i, x in enumerate(v):
            valid(x, s.get("items", True), f"{path}[{i}]", root)


S = lambda t, **kw: dict(type=t, **kw)
OBJ = lambda props, req=None, extra=False: {"type": "object", "properties": props,
                                            "required": list(props) if req is None else req,
                                            "additionalProperties": extra}
SCHEMAS = [
    ("person", OBJ({"name": S("string"), "age": S("integer")})),
    ("flag", OBJ({"ok": S("boolean")})),
    ("number", OBJ({"x": S("number")})),
    ("color enum", OBJ({"color": {"enum": ["red", "green", "blue"]}})),
    ("mixed enum", OBJ({"v": {"enum": [1, "two", None, True]}})),
    ("const", OBJ({"version": {"const": "1.0"}, "n": S("integer")})),
    ("nullable", OBJ({"v": {"anyOf": [S("null"), S("integer")]}})),
    ("type list", OBJ({"v": {"type": ["string", "number"]}})),
    ("nested", OBJ({"user": OBJ({"name": S("string"), "address": OBJ({"city": S("string"), "zip": S("string")})})})),
    ("array of strings", OBJ({"tags": S("array", items=S("string"), minItems=1, maxItems=3)})),
    ("array of ints bounded", OBJ({"nums": S("array", items=S("integer"), minItems=2, maxItems=4)})),
    ("array of objects", OBJ({"items": S("array", items=OBJ({"id": S("integer"), "label": S("string")}), maxItems=2)})),
    ("optional fields", OBJ({"a": S("string"), "b": S("integer"), "c": S("boolean")}, req=["a"])),
    ("no required", OBJ({"a": S("integer"), "b": S("integer")}, req=[])),
    ("anyOf objects", OBJ({"shape": {"anyOf": [OBJ({"circle": S("number")}), OBJ({"square": S("number")})]}})),
    ("oneOf", OBJ({"id": {"oneOf": [S("integer"), S("string")]}})),
    ("top-level array", S("array", items=S("integer"), minItems=1, maxItems=3)),
    ("top-level enum", {"enum": ["yes", "no"]}),
    ("free object", {"type": "object"}),
    ("deep", OBJ({"a": OBJ({"b": OBJ({"c": OBJ({"d": S("boolean")})})})})),
    ("empty array allowed", OBJ({"xs": S("array", items=S("number"), maxItems=2)})),
    ("titled", {"title": "T", "description": "d", **OBJ({"t": S("string", description="a title")})}),
    ("event with date", OBJ({"name": S("string", maxLength=20), "day": S("string", format="date")})),
    ("log entry", OBJ({"at": S("string", format="date-time"), "level": {"enum": ["info", "warn"]}})),
    ("alarm", OBJ({"time": S("string", format="time")})),
    ("record id", OBJ({"id": S("string", format="uuid")})),
    ("contact", OBJ({"email": S("string", format="email"), "ip": S("string", format="ipv4")})),
    ("product code", OBJ({"code": S("string", pattern="^[A-Z]{3}-[0-9]{3}$")})),
    ("short text", OBJ({"t": S("string", minLength=2, maxLength=8)})),
    ("rating", OBJ({"stars": S("integer", minimum=1, maximum=5), "votes": S("integer", minimum=0)})),
    ("temperature", OBJ({"c": S("number", minimum=-40, maximum=60.5)})),
    ("probability", OBJ({"p": S("number", minimum=0, maximum=1), "n": S("integer", exclusiveMinimum=0, exclusiveMaximum=100)})),
    ("order with $defs", {"$defs": {"item": OBJ({"sku": S("string", pattern="^[a-z]+[0-9]*$"), "qty": S("integer", minimum=1, maximum=9)})},
                          **OBJ({"items": S("array", items={"$ref": "#/$defs/item"}, minItems=1, maxItems=2)})}),
    ("tree via definitions", {"$ref": "#/definitions/node", "definitions": {"node": OBJ(
        {"v": S("integer", minimum=0, maximum=9), "kids": S("array", items={"$ref": "#/definitions/node"}, maxItems=1)}, req=["v"])}}),
]

