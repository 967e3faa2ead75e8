#!/usr/bin/env python3
"""test_webui.py — the chat page of `rocmforge serve` in headless Chromium (run by webui.sh).

Against a real `rocmforge serve --device cpu --api-key ...` on SmolLM2 (any free loopback port):
  1. the page and its assets: content types, ETag / 304, gzip, versioned URLs cached for good;
     their weight (bytes) and the page's first paint, written to <out>/webui-metrics.json;
  2. the page asks for the API key after the server's 401 and retries with it; the reply
     streams (its text is seen growing while the request runs); tok/s shows;
  3. Enter sends, Shift+Enter adds a line;
  4. a long reply is stopped mid-way: /metrics shows its KV blocks in use while it runs, all
     free again after the stop, and the choice counted as cancelled;
  5. a message over the context shows the server's error in the conversation;
  6. a reload finds the conversation (localStorage);
  7. a reply holding <script>, <img onerror> and a javascript: link is shown as text and runs
     nothing; Markdown and code highlighting still work. The model is not made to say this: the
     reply is written into localStorage as an assistant message and drawn by the same code;
  8. screenshots at desktop (1280x900) and phone (390x844) width;
  9. `--no-webui`: / is 404, the API still answers.
"""
import argparse
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

KEY = "webui-test-key"
FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)
    return cond


class Server:
    """`rocmforge serve` on port 0; the port is read from its 'listening on' line."""

    def __init__(self, rf, model, *extra):
        self.p = subprocess.Popen([rf, "serve", "-m", model, "--device", "cpu", "--port", "0", "-t", "2", *extra],
                                  stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.log = []
        self.port = None
        got = threading.Event()

        def reader():
            for line in self.p.stderr:
                self.log.append(line)
                m = re.search(r"listening on http://[^ ]*:(\d+)", line)
                if m and not self.port:
                    self.port = int(m.group(1))
                    got.set()
            got.set()

        threading.Thread(target=reader, daemon=True).start()
        if not got.wait(60) or not self.port:
            raise RuntimeError("server did not start:\n" + "".join(self.log))
        self.url = "http://127.0.0.1:%d" % self.port
        for _ in range(600):
            try:
                if urllib.request.urlopen(self.url + "/health", timeout=5).status == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)

    def get(self, path, headers=None):
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def metrics(self):
        _, _, body = self.get("/metrics", {"Authorization": "Bearer " + KEY})
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, v = line.rpartition(" ")
                out[name] = float(v)
        return out

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()


def assets_of(html):
    return re.findall(r'(?:src|href|content)="(/ui/[^"]+)"', html)


def check_http(srv):
    """Content types, caching, gzip; returns the weight table."""
    st, h, body = srv.get("/")
    check(st == 200 and h.get("Content-Type", "").startswith("text/html"), "GET / is the page (text/html)")
    check("script-src 'self'" in h.get("Content-Security-Policy", ""), "the page has a Content-Security-Policy")
    html = body.decode()
    urls = assets_of(html)
    check(all("?v=" in u for u in urls) and len(urls) >= 6, "asset URLs are versioned: %s" % urls)
    st, h2, _ = srv.get("/", {"If-None-Match": h.get("ETag", "")})
    check(st == 304, "GET / with its ETag answers 304")
    weight = {"/": {"identity": len(body), "gzip": len(srv.get("/", {"Accept-Encoding": "gzip"})[2])}}
    types = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
    for u in urls:
        st, h, b = srv.get(u)
        ext = os.path.splitext(u.split("?")[0])[1]
        check(st == 200 and h.get("Content-Type", "").startswith(types[ext]), "%s: 200 %s" % (u, h.get("Content-Type")))
        check("immutable" in h.get("Cache-Control", ""), "%s: cached for good (%s)" % (u, h.get("Cache-Control")))
        st, hg, bg = srv.get(u, {"Accept-Encoding": "gzip, deflate"})
        if hg.get("Content-Encoding") == "gzip":
            check(gzip.decompress(bg) == b, "%s: its gzip copy inflates to the same bytes" % u)
        weight[u.split("?")[0]] = {"identity": len(b), "gzip": len(bg)}
    st, h, _ = srv.get("/ui/app.js")
    check(st == 200 and h.get("Cache-Control") == "no-cache", "an unversioned asset URL is revalidated (no-cache)")
    check(srv.get("/ui/nothing.js")[0] == 404, "an unknown /ui/ file is 404")
    return weight


def wait(driver, cond, timeout, what):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: cond(d))
    except Exception:
        check(False, "timed out (%ss) waiting for: %s" % (timeout, what))
        raise


def last_assistant(driver):
    msgs = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")
    return msgs[-1] if msgs else None


def busy(driver):
    return driver.execute_script("return document.body.dataset.busy") == "1"


def set_field(driver, fid, value):
    driver.execute_script("var e=document.getElementById(arguments[0]); e.value=arguments[1];"
                          "e.dispatchEvent(new Event('input'))", fid, value)


def send(driver, text):
    box = driver.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rocmforge", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--chromedriver", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    srv = Server(a.rocmforge, a.model, "--api-key", KEY, "--ctx", "512", "--parallel", "2")
    driver = None
    report = {}
    try:
        report["weight_bytes"] = check_http(srv)

        opts = webdriver.ChromeOptions()
        opts.binary_location = a.chromium
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,900", "--no-first-run", "--disable-extensions"):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(a.chromedriver), options=opts)
        driver.set_window_size(1280, 900)

        # ---- 1. load: first paint, bytes over the wire ----
        driver.get(srv.url + "/")
        wait(driver, lambda d: d.find_element(By.ID, "model-name").text.startswith("SmolLM2"), 20, "the model's name")
        check(True, "the model's name shows: %s" % driver.find_element(By.ID, "model-name").text)
        paint = driver.execute_script(
            "var o={};performance.getEntriesByType('paint').forEach(function(e){o[e.name]=e.startTime});"
            "var n=performance.getEntriesByType('navigation')[0];o.domContentLoaded=n.domContentLoadedEventEnd;"
            "o.load=n.loadEventEnd;o.transfer=[n].concat(performance.getEntriesByType('resource'))"
            ".map(function(e){return [e.name.replace(location.origin,''),e.transferSize,e.encodedBodySize]});return o")
        report["first_load_ms"] = paint
        check("first-contentful-paint" in paint, "first contentful paint %.0f ms" % paint.get("first-contentful-paint", -1))
        check(driver.execute_script("return document.body.dataset.markdown") == "on", "Markdown rendering is on")

        # ---- 2. the key: 401 in the conversation, the key bar, retry, a streamed reply ----
        set_field(driver, "temperature", "0")
        set_field(driver, "max_tokens", "60")
        send(driver, "Hello! Who are you?")
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant .error"), 20, "the 401 error")
        err = driver.find_element(By.CSS_SELECTOR, ".msg.assistant .error").text
        check("401" in err and "API key" in err, "401 shows in the conversation: %r" % err)
        check(driver.find_element(By.ID, "keybar").is_displayed(), "the page asks for the key")
        driver.find_element(By.ID, "keybar-input").send_keys(KEY + Keys.ENTER)
        lengths = []
        t0 = time.time()
        while time.time() - t0 < 60:
            # one script: the page redraws whole messages, so an element found in one call may be gone in the next
            is_busy, n = driver.execute_script(
                "var m = document.querySelectorAll('.msg.assistant .body'); m = m[m.length - 1];"
                "return [document.body.dataset.busy == '1', m ? m.innerText.length : 0]")
            if is_busy:
                if n and (not lengths or lengths[-1] != n):
                    lengths.append(n)
            if not is_busy and lengths:
                break
            time.sleep(0.02)
        wait(driver, lambda d: not busy(d), 60, "the reply to end")
        reply = last_assistant(driver).find_element(By.CSS_SELECTOR, ".body").text
        check(len(lengths) >= 3, "the reply streamed in: text lengths seen while it ran %s" % lengths[:12])
        check(len(reply) > 0 and not driver.find_elements(By.CSS_SELECTOR, ".msg .error"), "reply: %r" % reply[:120])
        speed = driver.find_element(By.ID, "speed").text
        check("tok/s" in speed, "tok/s of the last reply shows: %r" % speed)
        report["first_reply_status"] = last_assistant(driver).find_element(By.CSS_SELECTOR, ".status").text

        # ---- 3. keyboard ----
        box = driver.find_element(By.ID, "input")
        box.send_keys("line one")
        box.send_keys(Keys.SHIFT, Keys.ENTER)
        box.send_keys("line two")
        n_msgs = len(driver.find_elements(By.CSS_SELECTOR, ".msg"))
        check(box.get_attribute("value") == "line one\nline two" and not busy(driver)
              and len(driver.find_elements(By.CSS_SELECTOR, ".msg")) == n_msgs, "Shift+Enter adds a line, sends nothing")
        box.clear()

        # ---- 4. stop a long reply mid-way; its KV blocks come back ----
        base = srv.metrics()
        set_field(driver, "max_tokens", "400")
        set_field(driver, "temperature", "0.8")
        set_field(driver, "seed", "7")
        send(driver, "Write a very long story about a dragon who learns to bake bread. Use many chapters.")
        wait(driver, lambda d: d.execute_script(
            "var m = document.querySelectorAll('.msg.assistant .body'); m = m[m.length - 1];"
            "return document.body.dataset.busy == '1' && m && m.innerText.length > 60"), 60, "the long reply to get going")
        driver.save_screenshot(os.path.join(a.out, "desktop-streaming.png"))
        wait(driver, lambda d: d.execute_script(
            "var s = JSON.parse(localStorage.getItem('rocmforge.chats.v1')), c = s.chats[0].messages;"
            "return c[c.length - 1].content.length > 0"), 5, "the running reply saved to localStorage")
        check(True, "the running reply is saved to localStorage while it streams")
        during = srv.metrics()
        check(during["rocmforge_kv_blocks_used"] > base["rocmforge_kv_blocks_used"],
              "while it runs, /metrics shows KV blocks used: %d" % during["rocmforge_kv_blocks_used"])
        driver.find_element(By.ID, "stop").click()
        wait(driver, lambda d: not busy(d), 10, "the stop")
        t_stop = time.time()
        after = None
        while time.time() - t_stop < 10:
            after = srv.metrics()
            if after["rocmforge_kv_blocks_used"] == base["rocmforge_kv_blocks_used"] and after["rocmforge_requests_active"] == 0:
                break
            time.sleep(0.05)
        check(after["rocmforge_kv_blocks_used"] == base["rocmforge_kv_blocks_used"] and after["rocmforge_requests_active"] == 0,
              "after the stop its blocks are free: used %d -> %d -> %d (%.2f s), active requests %d" % (
                  base["rocmforge_kv_blocks_used"], during["rocmforge_kv_blocks_used"],
                  after["rocmforge_kv_blocks_used"], time.time() - t_stop, after["rocmforge_requests_active"]))
        cancelled = 'rocmforge_choices_finished_total{reason="cancelled"}'
        check(after[cancelled] == base[cancelled] + 1, "the server counted the choice as cancelled")
        gen = after["rocmforge_generation_tokens_total"] - base["rocmforge_generation_tokens_total"]
        check(gen < 400, "stopped mid-way: %d of at most 400 tokens generated" % gen)
        status = last_assistant(driver).find_element(By.CSS_SELECTOR, ".status").text
        check("stopped" in status, "the reply is marked stopped: %r" % status)
        report["stopped_reply"] = {"tokens_generated": gen, "status": status}
        driver.save_screenshot(os.path.join(a.out, "desktop-stopped.png"))

        # ---- 5. a message over the context: the server's 400 in the conversation (own chat) ----
        driver.find_element(By.ID, "new-chat").click()
        set_field(driver, "max_tokens", "16")
        driver.execute_script("var e=document.getElementById('input'); e.value=arguments[0];", "word " * 1500)
        driver.find_element(By.ID, "send").click()
        wait(driver, lambda d: not busy(d) and last_assistant(d).find_elements(By.CSS_SELECTOR, ".error"), 60,
             "the context error")
        err = last_assistant(driver).find_element(By.CSS_SELECTOR, ".error").text
        check("400" in err and "context" in err.lower(), "the context error reads: %r" % err[:200])
        driver.find_element(By.CSS_SELECTOR, "#chat-list li.active .del").click()  # that chat is noise now
        # ---- 6. reload ----
        titles_before = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#chat-list li button.open")]
        driver.refresh()
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.user"), 10, "the conversation after reload")
        users = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".msg.user .body")]
        check(users[:1] == ["Hello! Who are you?"] and len(users) == 2, "after a reload the conversation is there: %s" % users)
        check([e.text for e in driver.find_elements(By.CSS_SELECTOR, "#chat-list li button.open")] == titles_before,
              "and the list of chats")
        check(driver.find_element(By.ID, "api_key").get_attribute("value") == KEY, "and the key")

        # ---- 7. unsafe markup in a reply is text; Markdown and highlighting work ----
        evil = ("Here is **bold** and `code`.\n\n<script>window.__xss = 1</script>\n\n"
                "Inline <img src=x onerror=\"window.__xss = 2\"> image and a [link](javascript:window.__xss=3).\n\n"
                "<div onmouseover=\"window.__xss = 4\">div</div>\n\n"
                "```python\ndef greet(name):\n    return f\"hello {name}\"  # <b>not bold</b>\n```\n")
        chat = {"id": "xss", "title": "markup test", "updated": 1, "messages": [
            {"role": "user", "content": "Show me <b>markup</b>"}, {"role": "assistant", "content": evil}]}
        driver.execute_script(
            "var s=JSON.parse(localStorage.getItem('rocmforge.chats.v1'));s.chats.unshift(arguments[0]);"
            "s.current='xss';localStorage.setItem('rocmforge.chats.v1',JSON.stringify(s));", chat)
        driver.refresh()
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant pre code .hljs-keyword"), 20,
             "the code block highlighted")
        body = last_assistant(driver).find_element(By.CSS_SELECTOR, ".body")
        text = body.text
        check(not body.find_elements(By.CSS_SELECTOR, "script, img, div[onmouseover], [onerror]"),
              "no script/img/handler element came out of the reply")
        check("<script>window.__xss = 1</script>" in text and '<img src=x onerror="window.__xss = 2">' in text
              and "<div onmouseover" in text, "the markup shows as text")
        user = driver.find_elements(By.CSS_SELECTOR, ".msg.user .body")[0].text
        check(user == "Show me <b>markup</b>", "a user message is text too: %r" % user)
        link = body.find_elements(By.CSS_SELECTOR, "a")
        check(all(not (l.get_attribute("href") or "").startswith("javascript:") for l in link),
              "the javascript: link lost its href (%d links)" % len(link))
        check(body.find_elements(By.CSS_SELECTOR, "strong") and body.find_elements(By.CSS_SELECTOR, "p code"),
              "Markdown is rendered (bold, inline code)")
        for l in link:
            try:
                l.click()
            except Exception:
                pass
        time.sleep(0.3)
        check(driver.execute_script("return window.__xss === undefined"), "nothing ran (window.__xss unset)")

        # ---- 8. screenshots ----
        driver.save_screenshot(os.path.join(a.out, "desktop.png"))
        driver.find_element(By.CSS_SELECTOR, "#chat-list li:nth-child(2) button.open").click()
        time.sleep(0.3)
        driver.save_screenshot(os.path.join(a.out, "desktop-chat.png"))
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        driver.find_element(By.CSS_SELECTOR, "#chat-list li:nth-child(1) button.open").click()
        time.sleep(0.3)
        driver.save_screenshot(os.path.join(a.out, "desktop-dark.png"))
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        driver.find_element(By.CSS_SELECTOR, "#chat-list li:nth-child(2) button.open").click()
        driver.set_window_size(390, 844)
        time.sleep(0.5)
        wide = driver.execute_script("return document.documentElement.scrollWidth")
        check(wide <= 390, "no horizontal scroll at phone width (scrollWidth %d)" % wide)
        driver.save_screenshot(os.path.join(a.out, "phone.png"))
        driver.find_element(By.ID, "toggle-sidebar").click()
        time.sleep(0.4)
        driver.save_screenshot(os.path.join(a.out, "phone-drawer.png"))
        driver.execute_script("document.getElementById('scrim').click()")  # its visible strip is narrow
        driver.find_element(By.ID, "toggle-settings").click()
        time.sleep(0.2)
        driver.save_screenshot(os.path.join(a.out, "phone-settings.png"))

        # ---- first paint again, cold and warm (cache), for docs/webui.md ----
        def painted(d):  # the paint entry can come after readyState is complete: wait for both
            return d.execute_script(
                "if (document.readyState != 'complete') return null; var o = {};"
                "performance.getEntriesByType('paint').forEach(function(e){o[e.name]=e.startTime});"
                "if (o['first-contentful-paint'] === undefined) return null;"
                "o.transferred = [performance.getEntriesByType('navigation')[0]]"
                ".concat(performance.getEntriesByType('resource')).reduce(function(s,e){return s+e.transferSize},0);"
                "return o")
        driver.set_window_size(1280, 900)
        cold, warm = [], []
        for runs, clear in ((cold, True), (warm, False)):
            for _ in range(5):
                if clear:
                    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
                driver.get("about:blank")
                driver.get(srv.url + "/")
                runs.append(wait(driver, painted, 10, "the first paint"))
        report["first_paint_cold_ms"] = cold
        report["first_paint_warm_ms"] = warm
        # the 401 and 400 answers asked for above are logged by Chrome as failed loads: not errors here
        logs = [l for l in driver.get_log("browser") if l.get("level") == "SEVERE" and l.get("source") != "network"]
        check(not logs, "no errors in the browser console: %s" % logs[:3])
    except Exception:
        if driver:  # what the page looked like and said when it went wrong
            driver.save_screenshot(os.path.join(a.out, "failure.png"))
            for l in driver.get_log("browser"):
                print("console:", l)
        print("server log:\n" + "".join(srv.log[-20:]))
        raise
    finally:
        if driver:
            driver.quit()
        srv.stop()

    # ---- 9. --no-webui ----
    off = Server(a.rocmforge, a.model, "--no-webui")
    try:
        check(off.get("/")[0] == 404 and off.get("/ui/app.js")[0] == 404, "--no-webui: / and /ui/ are 404")
        check(off.get("/v1/models")[0] == 200, "--no-webui: the API still answers")
    finally:
        off.stop()

    with open(os.path.join(a.out, "webui-metrics.json"), "w") as f:
        json.dump(report, f, indent=1)
    print("screenshots and webui-metrics.json in", a.out)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
