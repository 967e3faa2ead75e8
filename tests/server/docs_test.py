#!/usr/bin/env python3
"""docs_test.py — every example of docs/server.md run, unmodified, against a live `rocmforge serve`
(CTest `cli_serve_docs`, tests/CMakeLists.txt; SmolLM2 on the CPU, a free loopback port,
server_suite.py's child process).

What runs: every fenced block of the file whose language is `sh`, `bash` or `python`, in file
order, each in a fresh process (bash -e -o pipefail; the .venv's python).

The one substitution: examples address the server as `http://localhost:8080`; the test replaces
that text, and only that, with `http://127.0.0.1:PORT` of its own server. A block that still
names port 8080 afterwards fails (it would talk to some other server). The key is not
substituted: the test's server runs with `--api-key sk-local`, the key the examples use
(Python: `api_key="sk-local"`; shell: `$KEY`, which the test exports as KEY=sk-local), so a
snippet that forgets the key fails with a 401.

Skipping: a block preceded (on the line before its fence, blank lines allowed) by
`<!-- docs_test: skip (REASON) -->` is not run and is listed as skipped, by name, with the
reason; a `docs_test:` comment in any other form fails the test.

Checks:
  - each block exits 0 within 300 s (Python: no exception);
  - shell: every `curl` the block runs goes through a shim first on PATH that calls the real curl
    with `-D` (the headers to a file) and copies its output; each call must answer HTTP 200, and
    its body must be valid JSON without an "error" member (application/json) or a valid SSE
    stream (text/event-stream: blank-line separated events, `data:` JSON payloads, no error
    event) ending properly: `data: [DONE]` for chat / completions, `message_stop` for Messages,
    `response.completed` / `response.incomplete` for Responses. The number of calls must equal the
    number of lines that start with `curl`. A `# {…}` comment line that follows a curl command
    (before the next one) and parses as JSON is that call's expected answer, compared exactly;
  - coverage: the examples that ran must call, with curl, each of /v1/chat/completions,
    /v1/completions, /v1/messages, /v1/responses, /v1/embeddings, /tokenize, /detokenize,
    /v1/models, with `tools` and with `response_format`; and through an SDK each of
    chat.completions, completions, messages, responses, embeddings and models, with `tools` and
    `response_format`.
Output: `ok NAME (S s)`, `SKIP NAME: REASON`, `FAIL NAME: WHY`, then one summary line.
usage: docs_test.py ROCMFORGE MODEL [DOC]   (DOC: default docs/server.md of this tree)
Exit 0 = pass, 1 = fail, 77 = skipped (no curl)."""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import server_suite
from server_suite import Fail, check

HERE = os.path.dirname(os.path.abspath(__file__))
DOC_URL = "http://localhost:8080"
DOC_KEY = "sk-local"
SKIP_RE = re.compile(r"^<!--\s*docs_test:\s*skip\s*\((.+)\)\s*-->$")
LANGS = {"sh": "shell", "bash": "shell", "python": "python"}
CURL_ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses",
               "/v1/embeddings", "/tokenize", "/detokenize", "/v1/models"]
SDK_CALLS = ["chat.completions.create", "completions.create", "messages.create", "responses.create",
             "embeddings.create", "models.list"]
SNIPPET_TIMEOUT = 300

CURL_SHIM = """#!/usr/bin/env bash
# docs_test.py's curl: the real one, its headers kept in a file and its output copied
d="$RF_DOCS_CALLS/$(date +%s%N)"
mkdir "$d"
printf '%s\\n' "$@" > "$d/args"
"$RF_DOCS_REAL_CURL" -D "$d/headers" "$@" | tee "$d/body"
rc=${PIPESTATUS[0]}
echo "$rc" > "$d/rc"
exit "$rc"
"""


def slug(title):
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def blocks(path):
    """The doc's fenced blocks: dicts with name, lang, line (of the fence), text, skip (reason)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, section, i, count = [], "top", 0, {}
    while i < len(lines):
        ln = lines[i]
        h = re.match(r"^#{1,4} (.*)", ln)
        if h:
            section = slug(h.group(1))
        m = re.match(r"^```(\w*)\s*$", ln)
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        check(j < len(lines), f"{path}:{start + 1}: unclosed fence")
        text = "\n".join(lines[i + 1:j]) + "\n"
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        prev = lines[k].strip() if k >= 0 else ""
        skip = None
        if "docs_test" in prev:
            sm = SKIP_RE.match(prev)
            check(sm and sm.group(1).strip(), f"{path}:{k + 1}: a docs_test marker must read "
                  f"'<!-- docs_test: skip (reason) -->': {prev!r}")
            skip = sm.group(1).strip()
        if lang in LANGS:
            count[section] = count.get(section, 0) + 1
            out.append({"name": f"{section}#{count[section]}-{lang} (line {start + 1})", "lang": LANGS[lang],
                        "line": start + 1, "text": text, "skip": skip})
        elif skip:
            raise Fail(f"{path}:{k + 1}: a skip marker before a ```{lang} block, which is never run")
        i = j + 1
    return out


def parse_sse(body, what):
    """(kind, events): events as (event name or None, data string); checks the framing."""
    text = body.decode("utf-8")
    check(text.endswith("\n\n"), f"{what}: stream does not end with a blank line: {text[-120:]!r}")
    events = []
    for ev in text[:-2].split("\n\n"):
        name, data = None, []
        for ln in ev.split("\n"):
            if ln.startswith(":"):
                continue
            check(ln.startswith("event: ") or ln.startswith("data: "), f"{what}: bad SSE line {ln[:120]!r}")
            if ln.startswith("event: "):
                name = ln[7:]
            else:
                data.append(ln[6:])
        if data:
            events.append((name, "\n".join(data)))
    check(events, f"{what}: empty stream")
    for name, data in events:
        if data == "[DONE]":
            continue
        try:
            j = json.loads(data)
        except ValueError:
            raise Fail(f"{what}: an event's data is not JSON: {data[:160]!r}")
        check(name != "error" and not (isinstance(j, dict) and (isinstance(j.get("error"), dict) or j.get("type") == "error")),
              f"{what}: error event {data[:300]}")
        if name is not None:
            check(isinstance(j, dict) and j.get("type") == name, f"{what}: event {name} with type {j.get('type')!r}")
    last_name, last = events[-1]
    if last_name is None:
        check(last == "[DONE]", f"{what}: a data-only stream must end with data: [DONE], ends {last[:120]!r}")
        check(sum(d == "[DONE]" for _, d in events) == 1, f"{what}: [DONE] more than once")
    else:
        check(last_name in ("message_stop", "response.completed", "response.incomplete"),
              f"{what}: a named-event stream ends with {last_name!r}")
    return events


def check_call(d, what):
    """One recorded curl call: status 200, a JSON body or a well-formed SSE stream; its JSON."""
    rc = open(os.path.join(d, "rc")).read().strip()
    check(rc == "0", f"{what}: curl exited {rc}")
    hdr = open(os.path.join(d, "headers"), encoding="latin-1").read()
    statuses = re.findall(r"^HTTP/[\d.]+ (\d{3})", hdr, re.M)
    body = open(os.path.join(d, "body"), "rb").read()
    check(statuses, f"{what}: no HTTP answer")
    check(statuses[-1] == "200", f"{what}: HTTP {statuses[-1]}: {body[:300]!r}")
    ct = (re.findall(r"^content-type:\s*([^;\r\n]+)", hdr, re.M | re.I) or [""])[-1].strip().lower()
    if ct == "application/json":
        try:
            j = json.loads(body)
        except ValueError:
            raise Fail(f"{what}: answer is not JSON: {body[:200]!r}")
        check(not (isinstance(j, dict) and (isinstance(j.get("error"), dict) or j.get("type") == "error")),
              f"{what}: error answer {body[:300]!r}")
        return j, ct
    check(ct == "text/event-stream", f"{what}: content-type {ct!r}")
    parse_sse(body, what)
    return None, ct


def expected_answers(text):
    """For each line starting with `curl`, the JSON of the first `# {…}` comment line after it
    (before the next curl) when that comment parses as JSON, else None."""
    out = []
    for ln in text.split("\n"):
        s = ln.strip()
        if s.startswith("curl ") or s == "curl":
            out.append(None)
        elif s.startswith("# ") and out and out[-1] is None:
            try:
                out[-1] = ("set", json.loads(s[2:]))
            except ValueError:
                out[-1] = ("not-json",)
    return [e[1] if e and e[0] == "set" else None for e in out]


class Runner:
    def __init__(self, srv, py, curl):
        self.srv, self.py, self.curl = srv, py, curl
        self.tmp = tempfile.mkdtemp(prefix="rf-docs-test-")
        bindir = os.path.join(self.tmp, "bin")
        os.mkdir(bindir)
        shim = os.path.join(bindir, "curl")
        with open(shim, "w") as f:
            f.write(CURL_SHIM)
        os.chmod(shim, 0o755)
        self.bindir = bindir
        self.url = f"http://127.0.0.1:{srv.port}"
        self.curl_args = []  # every call's argument text, for the coverage check
        self.sdk_text = []   # every python snippet that ran

    def substitute(self, b):
        text = b["text"].replace(DOC_URL, self.url)
        check(not re.search(r"[:/]8080\b", text), "names port 8080 other than as http://localhost:8080 "
              "(the one text the test substitutes)")
        return text

    def run(self, b, n):
        text = self.substitute(b)
        work = os.path.join(self.tmp, f"snippet{n}")
        os.mkdir(work)
        calls = os.path.join(work, "calls")
        os.mkdir(calls)
        env = dict(os.environ, KEY=DOC_KEY, RF_DOCS_CALLS=calls, RF_DOCS_REAL_CURL=self.curl,
                   PATH=self.bindir + os.pathsep + os.environ.get("PATH", ""))
        for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
            env.pop(k, None)
        if b["lang"] == "shell":
            cmd = ["bash", "-e", "-o", "pipefail", "-c", text]
        else:
            path = os.path.join(work, "snippet.py")
            with open(path, "w") as f:
                f.write(text)
            cmd = [self.py, path]
        try:
            p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, timeout=SNIPPET_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Fail(f"did not finish within {SNIPPET_TIMEOUT} s")
        out = p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        check(p.returncode == 0, f"exited {p.returncode}\n--- stdout ---\n{out[-1500:]}\n--- stderr ---\n{err[-2500:]}")
        if b["lang"] == "python":
            self.sdk_text.append(text)
            return
        done = sorted(os.listdir(calls))
        expect = expected_answers(text)
        check(len(done) == len(expect), f"ran {len(done)} curl calls, the block has {len(expect)} curl lines")
        for i, (d, exp) in enumerate(zip(done, expect)):
            args = open(os.path.join(calls, d, "args"), encoding="utf-8").read()
            self.curl_args.append(args)
            what = f"curl call {i + 1} ({args.split(chr(10))[0][:60]})"
            j, ct = check_call(os.path.join(calls, d), what)
            if exp is not None:
                check(j == exp, f"{what}: answer {json.dumps(j)[:300]} differs from the documented {json.dumps(exp)[:300]}")

    def coverage(self):
        missing = []
        for route in CURL_ROUTES:
            if not any(re.search(re.escape(self.url + route) + r"(\s|$)", a) for a in self.curl_args):
                missing.append(f"curl {route}")
        for field in ('"tools"', '"response_format"'):
            if not any(field in a for a in self.curl_args):
                missing.append(f"curl with {field}")
        for call in SDK_CALLS:
            if not any(re.search(r"\." + re.escape(call) + r"\(", t) for t in self.sdk_text):
                missing.append(f"SDK {call}")
        for kw in ("tools=", "response_format="):
            if not any(kw in t for t in self.sdk_text):
                missing.append(f"SDK with {kw}")
        check(not missing, "examples missing for: " + ", ".join(missing))


def health(srv):
    try:
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        c.request("GET", "/health")
        ok = c.getresponse().status == 200
        c.close()
        return ok
    except OSError:
        return False


def main():
    rf, model = sys.argv[1], sys.argv[2]
    doc = sys.argv[3] if len(sys.argv) > 3 else os.path.join(HERE, "..", "..", "docs", "server.md")
    curl = shutil.which("curl")
    if not curl:
        print("SKIP: curl is needed")
        return 77
    py = os.path.join(HERE, "..", "..", ".venv", "bin", "python")
    py = py if os.access(py, os.X_OK) else sys.executable
    try:
        bs = blocks(doc)
    except Fail as x:
        print(f"FAIL: {x}")
        return 1
    srv = server_suite.Process(rf, model, ["--api-key", DOC_KEY, "-c", "2048"], tag="docs-test")
    passed, failed, skipped = [], [], []
    try:
        srv.wait_ready(lambda: health(srv))
        r = Runner(srv, py, curl)
        for n, b in enumerate(bs):
            if b["skip"]:
                print(f"SKIP {b['name']}: {b['skip']}", flush=True)
                skipped.append(b["name"])
                continue
            t = time.time()
            try:
                r.run(b, n)
            except Fail as x:
                print(f"FAIL {b['name']}: {x}", flush=True)
                failed.append(b["name"])
                continue
            print(f"ok {b['name']} ({time.time() - t:.1f} s)", flush=True)
            passed.append(b["name"])
        try:
            r.coverage()
            print("ok coverage: every endpoint has a curl example and an SDK snippet", flush=True)
        except Fail as x:
            print(f"FAIL coverage: {x}", flush=True)
            failed.append("coverage")
        check(health(srv), "the server stopped answering /health")
        srv.stop()
    except Fail as x:
        print(f"FAIL: {x}\n--- server stderr ---\n{srv.stderr()}")
        srv.p.kill()
        return 1
    except BaseException:
        print(f"--- server stderr ---\n{srv.stderr()}")
        srv.p.kill()
        raise
    if failed:
        print(f"--- server stderr ---\n{srv.stderr()}")
    print(f"docs_test: {len(bs)} examples in {os.path.relpath(doc)}: {len(passed)} passed, {len(failed)} failed"
          f"{' (' + ', '.join(failed) + ')' if failed else ''}, {len(skipped)} skipped"
          f"{' (' + ', '.join(skipped) + ')' if skipped else ''} -> {'FAIL' if failed else 'PASS'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
