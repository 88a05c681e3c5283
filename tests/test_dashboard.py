#!/usr/bin/python3
"""test_dashboard.py AUTOLOCO [SCREENSHOT_DIR] -- the dashboard in a real browser.

Starts a short `autoloco demo` (2 sites on loopback over mTLS), loads site a's
dashboard in headless Chromium while it trains, waits for the charts to hold
data points, and checks that the savings figure on the page, and its two
parts (syncs avoided against DiLoCo at H_base, bytes saved by the codec),
and the share of communication hidden behind training (the demo runs with
[outer] overlap = delayed-mid) equal what /api/v1/status reports. Then `autoloco report` on the finished run's JSONL
must give one HTML file that opens offline with the charts drawn.
Screenshots go to SCREENSHOT_DIR (default: the test's temporary folder).
Exits 77 (skipped) when Chromium, its driver or Selenium is missing."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
except ImportError:
    skip("python3-selenium is not installed (run under /usr/bin/python3)")
for exe in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
    if not os.path.exists(exe):
        skip(f"{exe} is missing (apt-get install chromium chromium-driver)")

autoloco = os.path.abspath(sys.argv[1])
tmp = tempfile.mkdtemp(prefix="al-test-dashboard.")
shots = sys.argv[2] if len(sys.argv) > 2 else tmp
passed = failed = 0

def check(ok, what):
    global passed, failed
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if ok:
        passed += 1
    else:
        failed += 1

def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-quic", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
              f"--user-data-dir={tmp}/chrome-profile"):
        o.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)

def points(drv, chart):
    v = drv.execute_script(f"return document.getElementById('{chart}').getAttribute('data-points')")
    return int(v or 0)

# the browser first: a cold Chromium can take longer to start than a short
# demo takes to finish, and the dashboard lives only while its agent runs
drv = browser()
demo = subprocess.Popen([autoloco, "demo", "--sites", "2", "--workers", "1", "--steps", "240",
                         "--h-base", "16", "--overlap", "delayed-mid", "--dir", f"{tmp}/run", "--json"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
url = None
lines = []
deadline = time.time() + 60
while time.time() < deadline and url is None:
    line = demo.stdout.readline()
    if not line:
        break
    lines.append(line)
    m = re.search(r"site a: .*dashboard (http://127\.0\.0\.1:\d+/)", line)
    if m:
        url = m.group(1)
check(url is not None, f"demo started, site a's dashboard at {url}")
try:
    if url:
        # the agent may take a moment to listen: retry the first load
        for _ in range(50):
            try:
                urllib.request.urlopen(url + "api/v1/status", timeout=2).read()
                break
            except Exception:
                time.sleep(0.2)
        drv.get(url)
        end = time.time() + 90
        while time.time() < end:
            n = {c: points(drv, c) for c in ("chart-loss", "chart-h", "chart-bytes")}
            if min(n.values()) >= 4:
                break
            time.sleep(0.5)
        check(min(n.values()) >= 4, f"live charts hold data points: {n}")
        agree = False
        for _ in range(40):
            shown1 = drv.find_element("id", "savings-diloco-pct").text
            status = json.loads(urllib.request.urlopen(url + "api/v1/status", timeout=5).read())
            shown2 = drv.find_element("id", "savings-diloco-pct").text
            want = f"{status['savings_vs_diloco_pct']:.1f}"
            if shown1 == shown2 == want:
                agree = True
                break
            time.sleep(0.3)
        check(agree, f"savings on the page ({shown2}%) = /api/v1/status ({want}%)")
        # the saving in its two parts: syncs avoided against DiLoCo, and the codec
        parts = False
        for _ in range(40):
            page1 = (drv.find_element("id", "syncs-avoided").text,
                     drv.find_element("id", "codec-saved-pct").text)
            st = json.loads(urllib.request.urlopen(url + "api/v1/status", timeout=5).read())
            page2 = (drv.find_element("id", "syncs-avoided").text,
                     drv.find_element("id", "codec-saved-pct").text)
            try:
                got = [float(v) for v in page2]
            except ValueError:
                got = None
            if page1 == page2 and got and st["syncs"] > 0 \
                    and abs(got[0] - st["syncs_avoided"]) <= 0.051 \
                    and abs(got[1] - st["saved_by_codec_pct"]) <= 0.051 \
                    and st["syncs_avoided"] == st["syncs_diloco"] - st["syncs"] \
                    and st["saved_by_codec_bytes"] == st["bytes_raw"] - st["bytes_sent"] > 0:
                parts = True
                break
            time.sleep(0.3)
        check(parts, f"syncs avoided ({page2[0]}) and codec saving ({page2[1]}%) on the page = "
              f"/api/v1/status ({st['syncs_avoided']:.2f}, {st['saved_by_codec_pct']:.2f}%)")
        # [outer] overlap (issue 14): the share of the communication that ran
        # beside training, on the page as /api/v1/status reports it, and > 0
        hid = False
        for _ in range(40):
            page1 = drv.find_element("id", "comm-hidden-pct").text
            st = json.loads(urllib.request.urlopen(url + "api/v1/status", timeout=5).read())
            page2 = drv.find_element("id", "comm-hidden-pct").text
            want_h = f"{st['comm_hidden_pct']:.1f}"
            if page1 == page2 == want_h and st["comm_hidden_s"] > 0 \
                    and abs(st["comm_hidden_pct"] - 100 * st["comm_hidden_s"] / st["comm_s"]) < 1e-6:
                hid = True
                break
            time.sleep(0.3)
        check(hid, f"communication hidden behind training on the page ({page2}%) = "
              f"/api/v1/status ({want_h}%, {st['comm_hidden_s']:.2f} s of {st['comm_s']:.2f} s)")
        # membership (issue 17): the peer table says b is a member and when it
        # was last seen, as /api/v1/status and /metrics do
        member = False
        for _ in range(40):
            rows = drv.execute_script(
                "return Array.from(document.querySelectorAll('#peers tbody tr'))"
                ".map(r => [r.getAttribute('data-peer'), r.getAttribute('data-up'), r.innerText])")
            st = json.loads(urllib.request.urlopen(url + "api/v1/status", timeout=5).read())
            prom = urllib.request.urlopen(url + "metrics", timeout=5).read().decode()
            b = [p for p in st["peers"] if p["peer"] == "b"]
            if rows and rows[0][0] == "b" and rows[0][1] == "true" and "up" in rows[0][2] \
                    and b and b[0]["up"] is True and b[0]["last_seen"] \
                    and 'autoloco_peer_up{site="a",peer="b"} 1' in prom:
                member = True
                break
            time.sleep(0.3)
        check(member, f"peer table shows b as a member with its last-seen time, as the status "
              f"and /metrics do: {rows}")
        # agreement per round (issue 13): the newest rounds with their theta
        # and "2 of 2" sites agreeing, as /api/v1/rounds records them
        agreed, rows = False, []
        for _ in range(40):
            rows = drv.execute_script(
                "return Array.from(document.querySelectorAll('#agree tbody tr'))"
                ".map(r => [r.getAttribute('data-round'), r.innerText])")
            recs = json.loads(urllib.request.urlopen(url + "api/v1/rounds", timeout=5).read())["rounds"]
            byround = {str(r["round"]): r for r in recs}
            if rows and all(rd in byround and byround[rd]["theta"][:12] in txt
                            and f'{byround[rd]["agree"]} of {byround[rd]["configured"]}' in txt
                            for rd, txt in rows) and "2 of 2" in rows[0][1]:
                agreed = True
                break
            time.sleep(0.3)
        check(agreed, f"agreement table shows each round's theta and its sites (2 of 2): {rows[:2]}")
        drv.save_screenshot(os.path.join(shots, "dashboard.png"))
        # /metrics carries the same byte totals as the agent's status
        same = False
        for _ in range(40):
            st1 = json.loads(urllib.request.urlopen(url + "api/v1/status", timeout=5).read())
            met = urllib.request.urlopen(url + "metrics", timeout=5).read().decode()
            st2 = json.loads(urllib.request.urlopen(url + "api/v1/status", timeout=5).read())
            m = re.search(r'^autoloco_sent_bytes_total\{site="a"\} (\S+)$', met, re.M)
            if m and st1["bytes_sent"] == st2["bytes_sent"] == float(m.group(1)):
                same = True
                break
            time.sleep(0.2)
        check(same, f"/metrics autoloco_sent_bytes_total = status bytes_sent ({st2['bytes_sent']:.0f})")
        # 40 clients that never finish their request do not hold up training
        import socket
        host, port = url.split("//")[1].strip("/").split(":")
        slow = []
        for _ in range(40):
            c = socket.create_connection((host, int(port)))
            c.send(b"GET /metr")
            slow.append(c)
        r0 = json.loads(urllib.request.urlopen(url + "api/v1/status", timeout=5).read())["syncs"]
        t0 = time.time()
        r1 = r0
        while time.time() - t0 < 60 and r1 < r0 + 2:
            time.sleep(0.5)
            r1 = json.loads(urllib.request.urlopen(url + "api/v1/status", timeout=5).read())["syncs"]
        check(r1 >= r0 + 2, f"with 40 stalled connections open, rounds went on: syncs {r0} -> {r1} "
              f"in {time.time() - t0:.1f} s")
        for c in slow:
            c.close()
    out, _ = demo.communicate(timeout=300)
    lines.append(out)
    check(demo.returncode == 0, f"demo finished (exit {demo.returncode})")
    last = json.loads("".join(lines).strip().splitlines()[-1])
    check(last.get("theta_hash_agree") is True, "demo sites agree on theta_global")
    # the offline report
    events = f"{tmp}/run/site-a/events.jsonl"
    html = f"{tmp}/report.html"
    r = subprocess.run([autoloco, "report", events, "-o", html], capture_output=True, text=True)
    check(r.returncode == 0 and os.path.exists(html), f"autoloco report: {r.stdout.strip()}")
    drv.get("file://" + html)
    time.sleep(1)
    n = {c: points(drv, c) for c in ("chart-loss", "chart-h", "chart-bytes", "chart-time")}
    rounds = len([l for l in open(events) if '"event":"round"' in l])
    check(min(n.values()) >= 4 and n["chart-h"] == rounds,
          f"report opens offline with the charts drawn: {n} ({rounds} rounds)")
    avoided = drv.find_element("id", "syncs-avoided").text
    rec = [json.loads(l) for l in open(events) if '"event":"round"' in l][-1]
    check(abs(float(avoided) - (rec["syncs_diloco"] - rounds)) <= 0.051,
          f"report: syncs avoided {avoided} = {rec['syncs_diloco']:.2f} - {rounds} rounds")
    state = drv.find_element("id", "state").text
    check(state.startswith("report"), f"report mode: '{state}'")
    drv.save_screenshot(os.path.join(shots, "report.png"))
finally:
    drv.quit()
    if demo.poll() is None:
        demo.kill()
    shutil.rmtree(tmp, ignore_errors=True)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
