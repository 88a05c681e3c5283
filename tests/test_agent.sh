#!/usr/bin/env bash
# test_agent.sh AUTOLOCO -- multi-site runs of real agent processes over
# mutual TLS on 127.0.0.1 (issue 6):
#   1. 3 sites x 2 workers: same theta_global hash everywhere, the loss falls,
#      bytes sent by all sites = bytes received by all sites;
#   2. faults: a site killed (SIGKILL) mid-interval and, separately, mid-sync:
#      the survivors finish the round without it and go on; the killed site
#      restarted with --resume rejoins and ends with the same hash; a
#      connection cut through wanem mid-sync recovers without dropping a site;
#      a link cut inside a vote commits by the carry (2l); a power cut after a
#      vote with [outer] overlap restores the candidate voted for (2m);
#   3. exact resume: a 2-site run stopped by SIGTERM (each site finishes the
#      round) and resumed ends with the hash of the uninterrupted run, also
#      with 2 workers per site; `autoloco sim` with the same settings ends on
#      that hash too;
#   4. bad input: config errors, a peer with another run config, a certificate
#      for an unlisted site, a corrupt checkpoint, another preset's checkpoint,
#      a checkpoint without worker state for a 2-worker site.
# Every wait is bounded (timeout); nothing is left running. AL_TEST_DEADLINE
# sets the agents' round deadline (default 5 s; the sanitizer run uses more).
# AL_TEST_OVERLAP=delayed runs every agent with [outer] overlap = delayed (and
# the simulator of section 3 too), AL_TEST_FRAGMENTS=F with F fragments
# (overlap = streaming; default 16), AL_TEST_TAU=half|sync its [outer]
# overlap_steps; AL_TEST_SECTIONS="2 2c 3" runs only the
# sections with those tags (the "# ---- TAG." headers below), side by side,
# AL_TEST_JOBS (default 4) at a time; TAG:CASE runs one case of a section of
# several (2:interval, 2:stats). Each section stands alone: it makes its own
# runs and checkpoints.
here=$(cd "$(dirname "$0")" && pwd)
if [[ -n ${AL_TEST_SECTIONS:-} && -z ${AL_TEST_FILTERED:-} ]]; then
    # Each chosen section runs as its own script (the preamble, the section,
    # the end) in its own process and folder, AL_TEST_JOBS of them at a time
    # (default 4: they mostly wait on rounds and timers); their outputs follow
    # in the order asked, and the counts add up.
    out=$(mktemp -d /tmp/test_agent.XXXXXX)
    trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$out"' EXIT
    t0=$SECONDS
    for tag in $AL_TEST_SECTIONS; do
        while (($(jobs -rp | wc -l) >= ${AL_TEST_JOBS:-4})); do wait -n; done
        # (TAG:CASE: the section's case CASE alone, AL_TEST_CASES)
        cases=
        [[ $tag == *:* ]] && cases=${tag#*:}
        awk -v want="${tag%%:*}" '
            /^# ---- [0-9a-z]+\. / { t = $3; sub(/\.$/, "", t); keep = t == want; started = 1 }
            /^al_test_end/ { keep = 1 }
            !started || keep' "$0" >"$out/$tag.sh"
        (
            s=$SECONDS
            AL_TEST_CASES=$cases AL_TEST_FILTERED=1 AL_TEST_HERE=$here bash "$out/$tag.sh" "$@" >"$out/$tag.log" 2>&1
            echo "$? $((SECONDS - s))" >"$out/$tag.rc"
        ) &
    done
    wait
    rc=0 pass=0 fail=0
    for tag in $AL_TEST_SECTIONS; do
        read -r r t <"$out/$tag.rc" || r=1
        echo "---- section $tag: status $r, ${t:-?} s"
        grep -v ' passed, [0-9]* failed$' "$out/$tag.log"
        n=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$out/$tag.log" | tail -n 1)
        np=${n% *} nf=${n#* }
        pass=$((pass + ${np:-0})) fail=$((fail + ${nf:-1})) # (no count line: it ended early)
        [[ $r == 0 && -n $n ]] || rc=1
    done
    echo "---- sections $AL_TEST_SECTIONS: $((SECONDS - t0)) s"
    echo "$pass passed, $fail failed"
    exit $rc
fi
. "${AL_TEST_HERE:-$here}/shell_lib.sh"
al_test_start test-agent "${1:-}"

al_test_run_dir a,b,c,mallory

# conf DIR SITE "SITES" PORTS... -- write DIR/SITE.ini; extra keys from $EXTRA
conf() {
    local dir=$1 me=$2 sites=$3
    shift 3
    local i=0 s
    mkdir -p "$dir"
    {
        echo "[site]"
        echo "name = $me"
        for s in $sites; do
            [[ $s == "$me" ]] && echo "listen = 127.0.0.1:${PORTS[$i]}"
            i=$((i + 1))
        done
        echo "run_id = test"
        echo "[peers]"
        i=0
        for s in $sites; do
            [[ $s != "$me" ]] && echo "$s = 127.0.0.1:${PEER_PORTS[$i]:-${PORTS[$i]}}"
            i=$((i + 1))
        done
        echo "[tls]"
        echo "ca = $tmp/certs/ca.pem"
        echo "cert = $tmp/certs/${CERT:-$me}.pem"
        echo "key = $tmp/certs/${CERT:-$me}.key"
        echo "[model]"
        echo "preset = ${PRESET:-tiny}"
        echo "[data]"
        echo "train = $tmp/data/train.bin"
        echo "val = $tmp/data/val.bin"
        echo "[inner]"
        echo "batch = 4"
        echo "seq = 32"
        echo "steps = ${STEPS:-40}"
        echo "warmup = 5"
        echo "lr = 1e-2"
        echo "threads = 1"
        echo "workers = ${WORKERS:-1}"
        echo "eval_every = 0"
        echo "eval_batches = 4"
        echo "[outer]"
        echo "codec = int8+zstd"
        echo "overlap = ${OVERLAP:-${AL_TEST_OVERLAP:-none}}"
        echo "fragments = ${AL_TEST_FRAGMENTS:-16}"
        echo "overlap_steps = ${AL_TEST_TAU:-half}"
        echo "lr = ${OUTER_LR:-0.7}"
        [[ -n ${S_REF:-} ]] && echo "s_ref = $S_REF"
        echo "[policy]"
        echo "name = fixed"
        echo "h_base = ${H:-10}"
        echo "[round]"
        echo "deadline_s = ${DEADLINE:-${AL_TEST_DEADLINE:-5}}"
        echo "quorum = ${QUORUM:-majority}"
        [[ -n ${HB:-} ]] && echo "heartbeat_s = $HB"
        [[ -n ${PT:-} ]] && echo "peer_timeout_s = $PT"
        echo "[checkpoint]"
        echo "dir = $dir/run-$me"
        echo "every = ${EVERY:-0}"
        echo "keep = 3"
    } >"$dir/$me.ini"
}

# run2 DIR [resume] -- sites a and b of DIR to the end (resume: each from its
# checkpoints); status 0 if both end with 0
run2() {
    local dir=$1 s
    for s in a b; do
        if [[ ${2:-} == resume ]]; then start $dir $s --resume $dir/run-$s; else start $dir $s; fi
    done
    await "$PID_a" 400 && await "$PID_b" 400
}
# stop2 DIR ROUND DELAY -- start a and b; DELAY s after both logged round
# ROUND, SIGTERM to both at once: each finishes the round in progress with the
# other, saves and ends (status 0 if both end with 0). DELAY puts the signal
# in the middle of the next interval, so both are in the same round.
stop2() {
    local dir=$1 r=$2 ra=0
    start $dir a
    start $dir b
    for _ in $(seq 1 300); do grep -q "round $r |" $dir/a.log 2>/dev/null && grep -q "round $r |" $dir/b.log 2>/dev/null && break; sleep 0.1; done
    sleep "$3"
    kill -TERM "$PID_a" "$PID_b"
    await "$PID_a" 60 || ra=1
    await "$PID_b" 60 || ra=1
    return $ra
}

# pace_of REF_EVENTS RUN_EVENTS: a run's commit rate from round 2 on against a
# reference run's, "ratio (x against y commits/s)": each rate is 1 / the median
# spacing of consecutive commits (a loaded machine's single stall moves a
# median little; the runs are short)
pace_of() {
    python3 - "$1" "$2" <<'PY'
import json, statistics, sys
def rate(path):
    try:
        t = [r["t"] for r in map(json.loads, open(path)) if r.get("event") == "round" and r["round"] >= 2]
    except OSError:
        return 0.0
    gaps = [b - a for a, b in zip(t, t[1:])]
    return 1 / statistics.median(gaps) if len(gaps) >= 3 and statistics.median(gaps) > 0 else 0.0
ref, run = rate(sys.argv[1]), rate(sys.argv[2])
print(f"{run / ref:.2f} ({run:.1f} against {ref:.1f} commits/s)" if ref else "0 (no reference)")
PY
}
evl() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["final_eval_loss"])' "$1" 2>/dev/null; }
# pace_holds PACE: PACE (pace_of's line) is at least 0.8 of the fault-free
# run's; 0.5 with AL_TEST_SANITIZED=1 (CI's ASan step: every site runs 2-10x
# slower there and a fault's fixed costs -- a deadline, a reconnect -- weigh
# more against the shorter reference rounds)
pace_holds() {
    python3 -c "import sys; sys.exit(float(sys.argv[1]) < float(sys.argv[2]))" "${1%% *}" \
        "$([[ ${AL_TEST_SANITIZED:-0} == 1 ]] && echo 0.5 || echo 0.8)"
}

# ---- 1. three sites, two workers each -------------------------------------------
PORTS=($(port) $(port) $(port))
for s in a b c; do WORKERS=2 conf r1 $s "a b c"; done
for s in a b c; do start r1 $s; done
rc=0
for s in a b c; do
    eval "p=\$PID_$s"
    await "$p" 400 || rc=1
done
if [[ $rc -ne 0 ]]; then
    no "3x2 run: an agent failed: $(tail -n 3 r1/*.log)"
else
    ha=$(hash_of r1/run-a/summary.json) hb=$(hash_of r1/run-b/summary.json) hc=$(hash_of r1/run-c/summary.json)
    [[ -n $ha && $ha == "$hb" && $ha == "$hc" ]] && ok "3 sites x 2 workers: theta_global hash agrees ($ha)" ||
        no "3x2 hashes differ: $ha $hb $hc"
    # the workers are forked once, before gRPC, HTTP or OpenMP start a thread
    n=$(grep -c "2 workers forked once (process threads: 1)" r1/a.log)
    [[ $n -eq 1 ]] && ok "3x2: workers forked once, from a single-threaded process" ||
        no "3x2: expected one 'forked once (process threads: 1)' line, got $n: $(grep forked r1/a.log)"
    python3 - r1 2>&1 <<'EOF' && ok "3x2: loss falls; bytes sent by senders = bytes received by receivers; every round's theta hash agrees" || no "3x2 loss/bytes/theta check"
import json, sys
d = sys.argv[1]
rounds = [r for r in map(json.loads, open(f"{d}/run-a/events.jsonl")) if r["event"] == "round"]
assert rounds[-1]["train_loss"] < rounds[0]["train_loss"], (rounds[0]["train_loss"], rounds[-1]["train_loss"])
sent = sum(json.load(open(f"{d}/run-{s}/summary.json"))["bytes_sent"] for s in "abc")
recv = sum(json.load(open(f"{d}/run-{s}/summary.json"))["bytes_recv"] for s in "abc")
print(f"  loss {rounds[0]['train_loss']:.3f} -> {rounds[-1]['train_loss']:.3f}; sent {sent:.0f} B, received {recv:.0f} B")
assert sent == recv and sent > 0
assert all(r["members"] == 3 for r in rounds)
# every round record carries theta_global's hash, the same on every site
th = {s: {r["round"]: r.get("theta") for r in map(json.loads, open(f"{d}/run-{s}/events.jsonl"))
          if r["event"] == "round"} for s in "abc"}
assert th["a"] == th["b"] == th["c"] and all(len(h or "") == 64 for h in th["a"].values()), th
EOF
fi

# ---- 2. faults: kill mid-interval / mid-sync, rejoin with --resume ---------------
# (a case ending in + is a second try: see the interval case's check below)
cases=(${AL_TEST_CASES:-interval stats})
for ((ci = 0; ci < ${#cases[@]}; ci++)); do
    fault=${cases[ci]%+}
    dir=r2-${cases[ci]}
    PORTS=($(port) $(port) $(port))
    for s in a b c; do PRESET=demo STEPS=200 EVERY=1 conf $dir $s "a b c"; done
    # mid-stats: a and b also pause 0.7 s between committing a round and
    # publishing its snapshot, so that c's registration lands in that window
    # (it once registered c a round later at one peer than at the other)
    # mid-interval: a serves joiners half of its state (a peer that lies about
    # the state's size, issue 17): c, which asks a first (of sites at the
    # same round, the first by name), must refuse it and take b's
    afault=badstate bfault=publish:0
    [[ $fault == stats ]] && afault=publish:700 bfault=publish:700
    AL_FAULT=$afault start $dir a
    AL_FAULT=$bfault start $dir b
    AL_FAULT=$fault:3 start $dir c
    await "$PID_c" 60
    rc=$?
    [[ $rc -eq 137 ]] || no "$fault: site c should have died by SIGKILL (status $rc)"
    # restart it once the survivors are a round further: it must rejoin them
    for _ in $(seq 1 600); do grep -q "round 4 |" $dir/a.log 2>/dev/null && break; sleep 0.1; done
    # while c is away, a's /metrics and /api/v1/status say so (issue 17)
    url=$(grep -o "dashboard at http://[0-9.:]*/" $dir/a.log | head -n 1 | cut -d' ' -f3)
    python3 - "$url" 2>&1 <<'EOF' && ok "$fault kill: a's /metrics and status show c left out and the drop" || no "$fault kill: membership not in /metrics or status"
import json, sys, urllib.request
url = sys.argv[1]
m = urllib.request.urlopen(url + "metrics", timeout=5).read().decode()
st = json.loads(urllib.request.urlopen(url + "api/v1/status", timeout=5).read())
assert 'autoloco_peer_up{site="a",peer="c"} 0' in m, [l for l in m.splitlines() if "peer_up" in l]
assert 'autoloco_peer_up{site="a",peer="b"} 1' in m
assert 'autoloco_events_total{site="a",kind="drop"}' in m
c = [p for p in st["peers"] if p["peer"] == "c"][0]
assert c["up"] is False and c["last_seen"] > 0, c
assert any(e["kind"] == "drop" and e["site"] == "c" for e in st["events"]), st["events"]
EOF
    start $dir c --resume "$dir/run-c"
    rca=0
    await "$PID_a" 400 || rca=1
    await "$PID_b" 400 || rca=1
    await "$PID_c" 400 || rca=1
    ha=$(hash_of $dir/run-a/summary.json) hb=$(hash_of $dir/run-b/summary.json) hc=$(hash_of $dir/run-c/summary.json)
    if [[ $rca -ne 0 ]]; then
        no "$fault kill: a run failed: $(tail -n 2 $dir/*.log)"
    elif [[ -z $ha || $ha != "$hb" || $ha != "$hc" ]]; then
        no "$fault kill: hashes differ after rejoin: $ha $hb $hc"
    elif ! grep -q "round 3.*sites 2\|dropping c\|leaving it out" $dir/a.log; then
        no "$fault kill: survivors did not finish round 3 without c: $(grep round $dir/a.log | head -5)"
    elif ! grep -q "joined at round" $dir/c.log; then
        no "$fault kill: c did not rejoin: $(tail -n 3 $dir/c.log)"
    elif [[ $fault == interval && ${cases[ci]} != *+ ]] &&
        ! grep -q "pulling the committed state from a" $dir/c.log; then
        # c pulls from the furthest peer it has heard, a only at a tie: when
        # b's status was a round ahead of a's (a loaded machine: the ASan run
        # with sections side by side), a's half state was never offered, so
        # the refusal below was not exercised. Run the case once more; a
        # second miss fails it (the branch below).
        echo "note: c pulled from b first ($(grep -h "pulling the committed" $dir/c.log | head -n 1 | cut -c1-120)): the interval case again"
        cases+=("interval+")
    elif [[ $fault == interval ]] && ! { grep -q "joining: the state from a refused.*trying another peer" $dir/c.log &&
        grep -q "joined at round .*(state from b)" $dir/c.log; }; then
        no "interval kill: c should have refused a's half state and joined from b: $(grep -h "joining\|joined" $dir/c.log)"
    elif ! grep -q '"event":"drop".*"site":"c"' $dir/run-a/events.jsonl ||
        ! grep -q '"event":"rejoin".*"site":"c"' $dir/run-a/events.jsonl; then
        no "$fault kill: a's event log lacks c's drop or rejoin: $(grep -v '"event":"round"' $dir/run-a/events.jsonl | head -5)"
    else
        ok "site killed mid-$fault: survivors went on without it, it rejoined with --resume, hashes agree ($ha)"
        [[ $fault == interval ]] && ok "the joiner refused a's state that did not fit and joined from b: $(grep -h "state from a refused" $dir/c.log | head -c 160)"
    fi
done

# ---- 2d. a peer that lies in its statistics (issue 17) -----------------------------
# c sends round 2's statistics with one inner step too many, or with tokens
# 2^64-1: a and b leave it out of that round, say why, and finish together.
# (streaming: round 2's statistics count the outer round's steps so far)
n=10
if [[ ${AL_TEST_OVERLAP:-} == streaming ]]; then
    F=${AL_TEST_FRAGMENTS:-16}
    n=$((10 * (2 % F + 1) / F))
fi
for lie in "badstats:$((n + 1)) inner steps, this site ran $n" "badtokens:2^63 or more tokens, out of range"; do
    fault=${lie%%:*} why=${lie#*:}
    dir=r2d-$fault
    PORTS=($(port) $(port) $(port))
    for s in a b c; do conf $dir $s "a b c"; done
    start $dir a
    start $dir b
    AL_FAULT=$fault:2 start $dir c
    rc=0
    await "$PID_a" 400 || rc=1
    await "$PID_b" 400 || rc=1
    await "$PID_c" 120 >/dev/null # it trains on alone; only its end matters here
    ha=$(hash_of $dir/run-a/summary.json) hb=$(hash_of $dir/run-b/summary.json)
    if [[ $rc -eq 0 && -n $ha && $ha == "$hb" ]] &&
        grep -qF "round 2: leaving c out: its statistics say $why" $dir/a.log &&
        grep -qF "round 2: leaving c out: its statistics say $why" $dir/b.log; then
        ok "a peer whose statistics say $why is left out with that reason; a and b finish together"
    else
        no "lying peer ($fault): rc $rc, hashes $ha $hb: $(grep -h 'leaving\|error' $dir/a.log $dir/b.log | head -3)"
    fi
done

# ---- 2i. statistics pushed again with other numbers (issue 32) --------------------
# c pushes its statistics of every round from round 1 on, then again for the
# same (round, attempt) with one inner step more and with tokens 2^64-1. a and
# b keep the first (the ones their machines were fed), refuse the others with
# a log line, and go on with c as a member: all three end on one theta, at no
# less than 80% of the pace (commits per second from round 2 on) of the same
# run without the fault, started beside it (both share the machine alike).
for d in r2i-ref r2i-repush; do
    PORTS=($(port) $(port) $(port))
    for s in a b c; do STEPS=200 conf $d $s "a b c"; done
done
for s in a b c; do start r2i-ref $s; eval "REF_$s=\$PID_$s"; done
start r2i-repush a
start r2i-repush b
AL_FAULT=repush:1 start r2i-repush c
rc=0
for s in a b c; do await "$(eval echo \$REF_$s)" 400 || rc=1; done
for s in a b c; do await "$(eval echo \$PID_$s)" 400 || rc=1; done
h=() dir=r2i-repush
pace=$(pace_of r2i-ref/run-a/events.jsonl $dir/run-a/events.jsonl)
for s in a b c; do h+=("$(hash_of $dir/run-$s/summary.json)"); done
refused=$(cat $dir/a.log $dir/b.log | grep -c "refused c's statistics: statistics for round [0-9]*, attempt [0-9]* were already taken from c, with other numbers")
if [[ $rc -eq 0 && -n ${h[0]} && ${h[0]} == "${h[1]}" && ${h[0]} == "${h[2]}" && ${refused:-0} -ge 4 ]] &&
    ! grep -q "leaving c out" $dir/a.log $dir/b.log &&
    pace_holds "$pace"; then
    ok "statistics pushed again with other numbers: refused ($refused times), c stays a member, a, b and c end on one theta, at $pace of the pace without the fault"
else
    no "re-pushed statistics: status $rc, hashes ${h[*]}, $refused refusals, pace $pace: $(grep -h 'refused\|leaving\|error' $dir/a.log $dir/b.log | head -3)"
fi

# ---- 2f. a silent site: failure detection by heartbeats (issue 13) ------------------
# b freezes itself (SIGSTOP) mid-interval: it neither answers nor refuses. With
# [round] deadline_s = 30, a would wait 30 s for it; its heartbeats stop, so a
# calls it down within peer_timeout_s (2 s) + 1 s and goes on alone. (Two
# sites: with three, a and b must also agree on who is in, and under a full
# parallel test load a and b once each left the other out -- a live peer's
# connections refused -- the membership disagreement issue 13's state machine
# is to end; see docs/ARCHITECTURE.md, known limits.)
dir=r2f
PORTS=($(port) $(port))
for s in a b; do QUORUM=any STEPS=200 DEADLINE=30 HB=0.5 PT=2 conf $dir $s "a b"; done
start $dir a
AL_FAULT=freeze:3 start $dir b # SIGSTOP halfway through its round-3 interval
for _ in $(seq 1 1200); do [[ $(ps -o stat= -p "$PID_b") == T* ]] && break; sleep 0.05; done
t0=$(date +%s.%N)
for _ in $(seq 1 100); do grep -q "no heartbeat answered by b" $dir/a.log && break; sleep 0.05; done
t1=$(date +%s.%N)
rc=0
await "$PID_a" 120 || rc=1
kill -KILL "$PID_b" 2>/dev/null
kill -CONT "$PID_b" 2>/dev/null
wait "$PID_b" 2>/dev/null
dt=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
if [[ $rc -eq 0 ]] && grep -q "no heartbeat answered by b" $dir/a.log &&
    python3 -c "import sys; sys.exit(0 if $dt <= 3.0 else 1)" &&
    grep -q '"event":"down".*"site":"b"' $dir/run-a/events.jsonl &&
    grep -q "round 3 | .* sites 1 " $dir/a.log; then
    ok "a frozen site is down after ${dt} s (peer_timeout_s 2 + 1 s allowed, deadline 30 s); a goes on without it"
else
    no "frozen site: rc $rc, down after $dt s: $(grep -h 'heartbeat\|leaving\|dropping\|round 3 ' $dir/a.log | head -4)"
fi

# ---- 2g. a partition {a} | {b, c} through wanem (issue 13) -------------------------
# Every link to and from a goes through a wanem proxy; SIGUSR1 cuts and refuses
# them all (a partition), SIGUSR2 heals. With [round] quorum = majority, b and
# c go on committing, a says "no quorum" and commits nothing; after the heal a
# pulls the majority's state, says how many steps it discards, and the three
# finish together: one history (every round's theta equal wherever recorded).
# The cut falls while all three train (intervals of 100 steps, cut as soon as
# all three logged the same round), not in the few milliseconds of a vote: a
# member cut off after its peers split their votes may have voted for the value
# they saw, and they waited for it until the heal before the agent ran the
# carry (docs/ARCHITECTURE.md, "Known limits"; CI hit it once, b and c stalled
# 200 s); section 2l now cuts inside a vote on purpose.
dir=r2g
PORTS=($(port) $(port) $(port))
W=($(port) $(port) $(port) $(port)) # a->b, a->c, b->a, c->a
wan() { "$bin" wanem --listen 127.0.0.1:$1 --to 127.0.0.1:$2 --duration 600 >>$dir.wanem.log 2>&1 & pids+=($!); wans+=($!); }
wans=()
wan ${W[0]} ${PORTS[1]}
wan ${W[1]} ${PORTS[2]}
wan ${W[2]} ${PORTS[0]}
wan ${W[3]} ${PORTS[0]}
PEER_PORTS=("" ${W[0]} ${W[1]}) # (an array cannot be a command's prefix assignment)
STEPS=4000 H=100 HB=0.5 PT=2 conf $dir a "a b c"
PEER_PORTS=(${W[2]} "" "")
STEPS=4000 H=100 HB=0.5 PT=2 conf $dir b "a b c"
PEER_PORTS=(${W[3]} "" "")
STEPS=4000 H=100 HB=0.5 PT=2 conf $dir c "a b c"
unset PEER_PORTS
sleep 0.3
for s in a b c; do start $dir $s; done
lastround() { grep -o "round [0-9]* |" $dir/$1.log 2>/dev/null | tail -1 | grep -o "[0-9]*"; }
for _ in $(seq 1 1200); do
    r=$(lastround a)
    [[ $r -ge 3 && $(lastround b) == "$r" && $(lastround c) == "$r" ]] 2>/dev/null && break
    sleep 0.02
done
kill -USR1 "${wans[@]}"
ra0=$(lastround a) rb0=$(lastround b)
# heal once b, c went 4 rounds on and a has seen that it has no quorum (a needs
# peer_timeout_s to know)
for _ in $(seq 1 1200); do
    [[ $(lastround b) -ge $((rb0 + 4)) ]] 2>/dev/null && grep -q "no quorum" $dir/a.log && break
    sleep 0.1
done
ra1=$(lastround a) rb1=$(lastround b)
kill -USR2 "${wans[@]}"
rc=0
for s in a b c; do eval "await \$PID_$s 400" || rc=1; done
kill "${wans[@]}" 2>/dev/null
ha=$(hash_of $dir/run-a/summary.json) hb=$(hash_of $dir/run-b/summary.json) hc=$(hash_of $dir/run-c/summary.json)
# one history: for every round, the theta every site recorded is the same
forks=$(python3 - $dir <<'PY'
import json, sys
seen, bad = {}, 0
for s in "abc":
    for line in open(f"{sys.argv[1]}/run-{s}/events.jsonl"):
        e = json.loads(line)
        if e.get("event") == "round" and e.get("theta"):
            bad += seen.setdefault(e["round"], e["theta"]) != e["theta"]
print(bad)
PY
)
if [[ $rc -eq 0 && -n $ha && $ha == "$hb" && $ha == "$hc" && $forks == 0 && $ra1 == "$ra0" && $rb1 -ge $((rb0 + 3)) ]] &&
    grep -q "no quorum: 1 of 3 sites reachable" $dir/a.log &&
    grep -q "discarding [0-9]* inner steps" $dir/a.log &&
    grep -q "joined at round" $dir/a.log &&
    grep -q '"event":"no-quorum"' $dir/run-a/events.jsonl; then
    ok "partition {a} | {b, c}: b, c committed rounds $rb0..$rb1, a none (no quorum); after the heal a re-synced and all three end on ${ha:0:12} with one history"
else
    no "partition: rc $rc, a rounds $ra0..$ra1, b $rb0..$rb1, forks $forks, hashes ${ha:0:8} ${hb:0:8} ${hc:0:8}: $(grep -h 'quorum\|discarding\|joined\|error' $dir/a.log | head -4)"
fi

# ---- 2l. a link cut inside a vote: the carry (issue 32) ---------------------------------
# Every link to and from c goes through a wanem proxy. In round 3, c persists
# its vote and holds it unseen (AL_FAULT=hidevote:3: its driver waits, its
# server still serves the exchange), b holds its vote
# (AL_FAULT=holdvote:3); once a has voted (its hard.json says so) the test
# cuts c's links and releases b, whose exchange counts as failed: a voted the
# candidate, b null, c's vote unseen. Without the carry a and b wait for c's
# vote until the heal (c may have voted the candidate with a: a commit); with
# it they leave the attempt once c is dropped (peer_timeout_s), carry the
# value a reports into the next attempt, b fetches it from a by its hash, and
# both vote for it: round 3 commits within peer_timeout_s + one round of b's
# null vote. After the heal c catches up, and all three end on one theta with
# one history.
dir=r2l
PORTS=($(port) $(port) $(port))
W=($(port) $(port) $(port) $(port)) # a->c, b->c, c->a, c->b
wans=()
wan() { "$bin" wanem --listen 127.0.0.1:$1 --to 127.0.0.1:$2 --duration 600 >>$dir.wanem.log 2>&1 & pids+=($!); wans+=($!); }
wan ${W[0]} ${PORTS[2]}
wan ${W[1]} ${PORTS[2]}
wan ${W[2]} ${PORTS[0]}
wan ${W[3]} ${PORTS[1]}
PT2L=2 HB2L=0.5
PEER_PORTS=("" "" ${W[0]})
STEPS=600 H=10 HB=$HB2L PT=$PT2L conf $dir a "a b c"
PEER_PORTS=("" "" ${W[1]})
STEPS=600 H=10 HB=$HB2L PT=$PT2L conf $dir b "a b c"
PEER_PORTS=(${W[2]} ${W[3]} "")
STEPS=600 H=10 HB=$HB2L PT=$PT2L conf $dir c "a b c"
unset PEER_PORTS
sleep 0.3
start $dir a
AL_FAULT=holdvote:3 start $dir b
AL_FAULT=hidevote:3 start $dir c
now() { python3 -c 'import time; print(time.time())'; }
voted3() { python3 -c 'import json,sys; v = json.load(open(sys.argv[1]))["vote"]; sys.exit(not (v["round"] == 3 and v["vote"] == 2))' "$1" 2>/dev/null; }
for _ in $(seq 1 600); do
    grep -q "hiding the vote of round 3" $dir/c.log 2>/dev/null && grep -q "holding the vote of round 3" $dir/b.log 2>/dev/null &&
        voted3 $dir/run-a/hard.json && break
    sleep 0.05
done
kill -USR1 "${wans[@]}"
sleep 0.2 # (the proxies cut and refuse)
touch $dir/run-c/release $dir/run-b/release
lastround() { grep -o "round [0-9]* |" $dir/$1.log 2>/dev/null | tail -1 | grep -o "[0-9]*"; }
t_3=
for _ in $(seq 1 600); do
    [[ -z $t_3 ]] && grep -q "round 3 |" $dir/a.log && t_3=$(now)
    [[ $(lastround a) -ge 8 ]] 2>/dev/null && break
    sleep 0.05
done
[[ -z $t_3 ]] && grep -q "round 3 |" $dir/a.log && t_3=$(now)
rc3=$(lastround c)
kill -USR2 "${wans[@]}" # heal
rc=0
for s in a b c; do eval "await \$PID_$s 400" || rc=1; done
kill "${wans[@]}" 2>/dev/null
ha=$(hash_of $dir/run-a/summary.json) hb=$(hash_of $dir/run-b/summary.json) hc=$(hash_of $dir/run-c/summary.json)
# the longest of a's spacings between consecutive commits of rounds 4..8 (the
# majority's, c cut off): one round's time
round_s=$(python3 - $dir/run-a/events.jsonl <<'PY'
import json, sys
t = {r["round"]: r["t"] for r in map(json.loads, open(sys.argv[1])) if r.get("event") == "round"}
g = [t[r + 1] - t[r] for r in range(4, 8) if r in t and r + 1 in t]
print(f"{max(g):.3f}" if g else "")
PY
)
# from b's null vote (its release, after the cut) to a's commit of round 3, by
# the logs' own timestamps (the test's polling lags under load)
took=never
[[ -n $t_3 ]] && took=$(python3 - $dir <<'PY'
import datetime, re, sys
def at(path, text):
    for line in open(path):
        if text in line:
            return datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
    return None
t0 = at(f"{sys.argv[1]}/b.log", "fault: released the vote of round 3")
t1 = at(f"{sys.argv[1]}/a.log", "site a | round 3 |")
print(f"{t1 - t0:.2f}" if t0 and t1 else "never")
PY
)
inbound=$([[ $took != never ]] && python3 -c "import sys; t, pt, hb, r = map(float, sys.argv[1:]); print(int(0 <= t <= pt + hb + r))" "$took" $PT2L $HB2L "${round_s:-0}")
forks=$(python3 - $dir <<'PY'
import json, sys
seen, bad = {}, 0
for s in "abc":
    for line in open(f"{sys.argv[1]}/run-{s}/events.jsonl"):
        e = json.loads(line)
        if e.get("event") == "round" and e.get("theta"):
            bad += seen.setdefault(e["round"], e["theta"]) != e["theta"]
print(bad)
PY
)
if [[ $rc -eq 0 && -n $t_3 && $inbound == 1 && -n $ha && $ha == "$hb" && $ha == "$hc" && $forks == 0 ]] &&
    [[ ${rc3:-0} -le 3 ]] &&
    grep -q "attempt [0-9]* carries" $dir/a.log $dir/b.log &&
    grep -q "fetched the candidate .* from a" $dir/b.log; then
    ok "a link cut inside round 3's vote (a voted, b null, c's vote unseen): a and b carried a's value, b fetched it by its hash, round 3 committed $took s after b's null vote (peer_timeout_s $PT2L + heartbeat $HB2L + a round ${round_s} s); c caught up after the heal, all on ${ha:0:12}, one history"
else
    no "cut inside a vote: rc $rc, round 3 committed ${took} (s after b's null vote, before the heal) (bound $PT2L + $HB2L + ${round_s:-?} s), c at round ${rc3:-?} before the heal, forks $forks, hashes ${ha:0:8} ${hb:0:8} ${hc:0:8}: $(grep -h 'carries\|fetched\|refused\|error' $dir/a.log $dir/b.log | head -4)"
fi

# ---- 2m. overlap: a power cut after a vote, the voted candidate restored (issue 32) ---
# With [outer] overlap (delayed, or the suite's AL_TEST_OVERLAP), a persists
# its vote of round 3 and stops before any status shows it
# (AL_FAULT=pause:vote:3); the test kills all three sites at once and resumes
# them with --resume. a holds the candidate it voted for again (before issue
# 32 an overlapped restart dropped it while its status still reported the
# vote): its status is true and peers may fetch it. The run finishes with one
# theta and one history.
dir=r2m
PORTS=($(port) $(port) $(port))
ov=${AL_TEST_OVERLAP:-none}
[[ $ov == none ]] && ov=delayed
for s in a b c; do OVERLAP=$ov STEPS=120 H=10 EVERY=1 HB=0.5 PT=2 conf $dir $s "a b c"; done
AL_FAULT=pause:vote:3 start $dir a
start $dir b
start $dir c
for _ in $(seq 1 1200); do grep -q "paused at vote of round 3" $dir/a.log 2>/dev/null && break; sleep 0.05; done
paused=$(grep -c "paused at vote of round 3" $dir/a.log)
kill -KILL $PID_a $PID_b $PID_c
for s in a b c; do eval "wait \$PID_$s" 2>/dev/null; done
for s in a b c; do start $dir $s --resume $dir/run-$s; done
rc=0
for s in a b c; do eval "await \$PID_$s 400" || rc=1; done
ha=$(hash_of $dir/run-a/summary.json) hb=$(hash_of $dir/run-b/summary.json) hc=$(hash_of $dir/run-c/summary.json)
forks=$(python3 - $dir <<'PY'
import json, sys
seen, bad = {}, 0
for s in "abc":
    for line in open(f"{sys.argv[1]}/run-{s}/events.jsonl"):
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a line cut by the SIGKILL
        if e.get("event") == "round" and e.get("theta"):
            bad += seen.setdefault(e["round"], e["theta"]) != e["theta"]
print(bad)
PY
)
if [[ $paused -ge 1 && $rc -eq 0 && -n $ha && $ha == "$hb" && $ha == "$hc" && $forks == 0 ]] &&
    grep -q "round 3: holding the candidate voted for" $dir/a.log &&
    ! grep -q "is not restored with \[outer\] overlap" $dir/*.log; then
    ok "overlap = $ov: all three killed after a's vote of round 3 and resumed: a holds the candidate it voted for ($(grep -ho 'applying the candidate voted for before the restart\|fetched the candidate [0-9a-f]* from a' $dir/*.log | sort | uniq -c | tr -s ' ' | paste -sd ';' -)); one theta ${ha:0:12}, one history"
else
    no "overlap power cut after a vote: paused $paused, rc $rc, forks $forks, hashes ${ha:0:8} ${hb:0:8} ${hc:0:8}: $(grep -h 'holding\|candidate\|error' $dir/*.log | head -4)"
fi

# ---- 2h. a corrupted theta_global (issue 13) ----------------------------------------
# r2h: c flips a bit of its theta_global, and of the copy it publishes, halfway
# through round 2 (AL_FAULT=corrupt:2). At the interval's end it no longer
# hashes to the committed base: c says so, finds its own copy damaged too,
# pulls the round's state from a peer, trains the interval again, and all
# three end on one theta.
# r2hx (issue 32): c flips a bit of theta_global only, as round 3's exchange
# starts -- after the interval's end checked it -- and, with streaming, in a
# hash chunk outside round 3's fragment, which the candidate's hash does not
# read (AL_FAULT=corrupt:3:exchange). The check of theta_global before the
# candidate catches it in round 3: c votes no value, reloads its published
# copy, and all three end on one theta with one history. (Without the check,
# forced: c committed the flipped theta in round 3 under the clean hash and
# fell out of step only in round 4, whose candidate read that chunk; it
# rejoined at round 5 by a pull, and nothing said why.)
PORTS=($(port) $(port) $(port))
for s in a b c; do STEPS=100 conf r2h $s "a b c"; done
PORTS=($(port) $(port) $(port))
for s in a b c; do STEPS=100 conf r2hx $s "a b c"; done
start r2h a
start r2h b
AL_FAULT=corrupt:2 start r2h c
PID_ha=$PID_a PID_hb=$PID_b PID_hc=$PID_c
start r2hx a
start r2hx b
AL_FAULT=corrupt:3:exchange start r2hx c
rc=0 rcx=0
for s in a b c; do eval "await \$PID_h$s 300" || rc=1; done
for s in a b c; do eval "await \$PID_$s 300" || rcx=1; done
dir=r2h
ha=$(hash_of $dir/run-a/summary.json) hb=$(hash_of $dir/run-b/summary.json) hc=$(hash_of $dir/run-c/summary.json)
if [[ $rc -eq 0 && -n $ha && $ha == "$hb" && $ha == "$hc" ]] &&
    grep -q "round 2: theta_global hashes to .*, not the committed .*: corrupted here" $dir/c.log &&
    grep -q "the persisted theta_global is corrupted too" $dir/c.log &&
    grep -q "joined at round 2\|joined at round 3" $dir/c.log; then
    ok "a corrupted theta_global is caught at the end of its interval and repaired from a peer; all three end on ${ha:0:12}"
else
    no "corrupted theta: rc $rc, hashes ${ha:0:8} ${hb:0:8} ${hc:0:8}: $(grep -h 'corrupt\|joined\|error' $dir/c.log | head -4)"
fi
dir=r2hx
ha=$(hash_of $dir/run-a/summary.json) hb=$(hash_of $dir/run-b/summary.json) hc=$(hash_of $dir/run-c/summary.json)
forks=$(python3 - $dir <<'PY'
import json, sys
seen, bad = {}, 0
for s in "abc":
    for line in open(f"{sys.argv[1]}/run-{s}/events.jsonl"):
        e = json.loads(line)
        if e.get("event") == "round" and e.get("theta"):
            bad += seen.setdefault(e["round"], e["theta"]) != e["theta"]
print(bad)
PY
)
where="flipped a bit of theta_global at value [0-9]*, "
[[ ${AL_TEST_OVERLAP:-none} == streaming ]] && where+="in a hash chunk outside the fragment"
if [[ $rcx -eq 0 && -n $ha && $ha == "$hb" && $ha == "$hc" && $forks == 0 ]] &&
    grep -q "AL_FAULT corrupt: round 3: $where" $dir/c.log &&
    grep -q "round 3: theta_global hashes to .*, not the committed .*: corrupted here" $dir/c.log &&
    grep -q "round 3: theta_global reloaded" $dir/c.log; then
    ok "a bit flipped in theta_global after the interval's check ($(grep -o 'flipped a bit.*' $dir/c.log | head -1)) is caught before round 3's candidate and repaired by a reload in round 3; all three end on ${ha:0:12}, one history"
else
    no "corrupted theta at the exchange: rc $rcx, forks $forks, hashes ${ha:0:8} ${hb:0:8} ${hc:0:8}: $(grep -h 'corrupt\|reloaded\|joined\|error' $dir/c.log | head -5)"
fi

# ---- 2c. a connection cut through wanem mid-sync ----------------------------------
PORTS=($(port) $(port))
wp=$(port)
"$bin" wanem --listen 127.0.0.1:$wp --to 127.0.0.1:${PORTS[1]} --cut-after-bytes 60000 --duration 60 \
    >r3.wanem.log 2>&1 &
pids+=($!)
wanem=$!
PEER_PORTS=("" $wp) # a reaches b through the proxy
# (peer_timeout_s as the deadline: 5 s, the default, unless a sanitized run
# asks for more time; the reconnection after the cut must fit in it)
PT=${AL_TEST_DEADLINE:-5} conf r3 a "a b"
unset PEER_PORTS
PT=${AL_TEST_DEADLINE:-5} conf r3 b "a b"
sleep 0.3
start r3 a
start r3 b
rc=0
await "$PID_a" 400 || rc=1
await "$PID_b" 400 || rc=1
kill $wanem 2>/dev/null
ha=$(hash_of r3/run-a/summary.json) hb=$(hash_of r3/run-b/summary.json)
if [[ $rc -eq 0 && -n $ha && $ha == "$hb" ]] && ! grep -q "dropping\|leaving it out" r3/a.log r3/b.log; then
    ok "connection cut through wanem mid-sync: recovered, nobody dropped ($(grep -c cut r3.wanem.log) cut lines)"
else
    no "wanem cut: rc $rc, hashes $ha $hb: $(grep -h 'dropping\|error' r3/*.log | head -3)"
fi

# ---- 2e. poisoning (issue 17) -------------------------------------------------------
# c sends 50.0 in every element of its pseudo-gradient (and reports that norm).
# With [outer] max_delta_ratio (default 4) a and b leave its update out, say so,
# and end where a run of a and b alone ends; with the guard off (0) the same
# attack wrecks the model, which shows the check can fail.
PORTS=($(port) $(port))
for s in a b; do conf r2e-ref $s "a b"; done
start r2e-ref a
start r2e-ref b
await "$PID_a" 400 && await "$PID_b" 400 || no "poison reference run failed: $(tail -n 2 r2e-ref/*.log)"
for guard in on off; do
    dir=r2e-$guard
    PORTS=($(port) $(port) $(port))
    for s in a b c; do conf $dir $s "a b c"; done
    extra=()
    [[ $guard == off ]] && extra=(--set outer.max_delta_ratio=0)
    start $dir a "${extra[@]}"
    start $dir b "${extra[@]}"
    AL_FAULT=poison:50 start $dir c "${extra[@]}"
    rc=0
    await "$PID_a" 400 || rc=1
    await "$PID_b" 400 || rc=1
    await "$PID_c" 400
    eval "rc_$guard=$rc"
done
ref=$(evl r2e-ref/run-a/summary.json)
on=$(evl r2e-on/run-a/summary.json) off=$(evl r2e-off/run-a/summary.json)
ha=$(hash_of r2e-on/run-a/summary.json) hb=$(hash_of r2e-on/run-b/summary.json)
echo "  final eval loss: a and b alone $ref; with c poisoning, guard on $on, guard off $off"
if [[ $rc_on -eq 0 && -n $ha && $ha == "$hb" ]] && grep -q "leaving c's update out of the mean" r2e-on/a.log &&
    python3 -c "import sys; r, on = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(on - r) > 0.02 * r)" "$ref" "$on"; then
    ok "poisoning: c's 50x update left out with a log line; a and b agree and end within 2% of a run without c ($on vs $ref)"
else
    no "poisoning: status $rc_on, hashes $ha $hb, eval $on vs $ref: $(grep -h 'leaving\|error' r2e-on/a.log | head -3)"
fi
if python3 -c "import sys; r, off = float(sys.argv[1]), sys.argv[2]; sys.exit(not (off in ('', 'None') or float(off) > 1.5 * r))" "$ref" "$off"; then
    ok "poisoning with the guard off: the model is wrecked (eval $off vs $ref), so the check above can fail"
else
    no "poisoning with the guard off did not hurt: eval $off vs $ref"
fi

# ---- 2j. a liar (issues 17, 32) ------------------------------------------------------
# c sends 50.0 in every element but reports the norm of its honest Δ, so the
# median rule passes it. a and b leave its parts out of their shards' means
# and refuse the mean shard c computes (longer than any reported Δ): every
# member sees the same bytes, so all leave c out alike, for the round's later
# attempts and every later round until c restarts (its incarnation), and
# their machines no longer wait for its statistics. So a and b keep their
# pace: from round 2 on, commits at least 80% as often as a three-site run
# without the fault started beside it; they agree and end within 2% of a
# run of a and b alone.
# (a refused attempt waits out a deadline: 2 s, not the suite's 5)
for d in r2j-ref2 r2j-ref3 r2j-liar; do
    PORTS=($(port) $(port) $(port))
    sites="a b c"
    [[ $d == r2j-ref2 ]] && sites="a b"
    for s in $sites; do STEPS=100 DEADLINE=${AL_TEST_DEADLINE:-2} conf $d $s "$sites"; done
done
start r2j-ref2 a; R2a=$PID_a
start r2j-ref2 b; R2b=$PID_b
start r2j-ref3 a; R3a=$PID_a
start r2j-ref3 b; R3b=$PID_b
start r2j-ref3 c; R3c=$PID_c
dir=r2j-liar
start $dir a
start $dir b
AL_FAULT=liar:50 start $dir c
rc=0
await "$PID_a" 400 || rc=1
await "$PID_b" 400 || rc=1
await "$PID_c" 400
for p in $R2a $R2b $R3a $R3b $R3c; do await $p 400 || no "a reference run of 2j failed: $(tail -n 2 r2j-ref*/*.log | head -4)"; done
ref=$(evl r2j-ref2/run-a/summary.json)
liar=$(evl $dir/run-a/summary.json)
ha=$(hash_of $dir/run-a/summary.json) hb=$(hash_of $dir/run-b/summary.json)
# commits per second from round 2 to the end (a's event log), liar over fault-free
pace=$(pace_of r2j-ref3/run-a/events.jsonl $dir/run-a/events.jsonl)
if [[ $rc -eq 0 && -n $ha && $ha == "$hb" ]] &&
    grep -q "leaving c's part of shard .* exceeds the |delta| .* it reported" $dir/a.log &&
    grep -q "mean shard from c refused: its norm .* exceeds the longest |delta|" $dir/b.log &&
    grep -q "leaving c out of the round's next attempts and of every later round until it restarts" $dir/a.log &&
    python3 -c "import sys; r, v = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(v - r) > 0.02 * r)" "$ref" "$liar" &&
    pace_holds "$pace"; then
    ok "a liar (50.0 sent, the honest |delta| reported): refused with log lines and left out until it restarts; a and b agree, end within 2% of a run without it ($liar vs $ref) and keep their pace: $pace of a fault-free run's"
else
    no "liar: status $rc, hashes $ha $hb, eval $liar vs $ref, pace $pace: $(grep -h 'lies\|refused\|error' $dir/a.log $dir/b.log | head -3)"
fi

# ---- 2k. a liar seen by one site only (issue 32) --------------------------------------
# c sends a a mean shard of 50.0 (b gets the honest one): only a sees the lie.
# a leaves c out and says so in its status; b follows (c is left out by a
# liar-catching peer), so the two agree on the members of the next attempt
# instead of voiding attempt after attempt. a and b end on one theta and, from
# round 2 on, commit at least 80% as often as a fault-free run beside them.
for d in r2k-ref3 r2k-liar; do
    PORTS=($(port) $(port) $(port))
    for s in a b c; do STEPS=100 DEADLINE=${AL_TEST_DEADLINE:-2} conf $d $s "a b c"; done
done
start r2k-ref3 a; R3a=$PID_a
start r2k-ref3 b; R3b=$PID_b
start r2k-ref3 c; R3c=$PID_c
dir=r2k-liar
start $dir a
start $dir b
AL_FAULT=liar:50:a start $dir c
rc=0
await "$PID_a" 400 || rc=1
await "$PID_b" 400 || rc=1
await "$PID_c" 400
for p in $R3a $R3b $R3c; do await $p 400 || no "a reference run of 2k failed: $(tail -n 2 r2k-ref3/*.log | head -4)"; done
ha=$(hash_of $dir/run-a/summary.json) hb=$(hash_of $dir/run-b/summary.json)
pace=$(pace_of r2k-ref3/run-a/events.jsonl $dir/run-a/events.jsonl)
if [[ $rc -eq 0 && -n $ha && $ha == "$hb" ]] &&
    grep -q "mean shard from c refused: its norm .* exceeds the longest |delta|" $dir/a.log &&
    ! grep -q "mean shard from c refused" $dir/b.log &&
    grep -q "leaving c out of the round's next attempts and of every later round until it restarts (a leaves it out as a liar)" $dir/b.log &&
    pace_holds "$pace"; then
    ok "a liar seen by a only: b follows a's exclusion from its status; a and b agree and keep their pace: $pace of a fault-free run's"
else
    no "liar seen by one: status $rc, hashes $ha $hb, pace $pace: $(grep -h 'liar\|refused\|error' $dir/a.log $dir/b.log | head -3)"
fi

# ---- 2ow. a one-way cut of 60 s (issue 32) -----------------------------------------
# c's calls to a go through a wanem proxy; SIGUSR1 refuses them for 60 s, while
# a's calls to c (pings answered with c's status, statistics, shards) still
# get through. a then hears c only in answers, b hears both: every site
# reads in the statuses' hears that a does not hear c, and all leave c (the
# higher index of the broken pair) out of the attempts' members, so a and b
# commit at the pace of a fault-free 3-site run beside them (pace_holds over
# the cut's 60 s, from peer_timeout_s after it starts), no site exits early,
# and after the heal all three end on one theta with one history. (The rule
# of each site's own view: a waits deadline_s for c's statistics, b counts c
# as a member, every attempt is void: pace ~0.)
PORTS=($(port) $(port) $(port))
# (runs far longer than the test: they must outlast the cut on a fast machine,
# where 10000 steps ended inside it (CI: round 999 before the heal); the
# reference is stopped at the heal, the cut run with SIGTERM to all three at
# once once c commits again after the heal)
for s in a b c; do STEPS=1000000 HB=0.5 PT=2 conf r2ow-ref $s "a b c"; done
dir=r2ow
PORTS=($(port) $(port) $(port))
W=($(port)) # c->a
"$bin" wanem --listen 127.0.0.1:${W[0]} --to 127.0.0.1:${PORTS[0]} --duration 900 >>$dir.wanem.log 2>&1 &
pids+=($!)
wan=$!
for s in a b; do STEPS=1000000 HB=0.5 PT=2 conf $dir $s "a b c"; done
PEER_PORTS=(${W[0]} "" "")
STEPS=1000000 HB=0.5 PT=2 conf $dir c "a b c"
unset PEER_PORTS
sleep 0.3
start r2ow-ref a; R3a=$PID_a
start r2ow-ref b; R3b=$PID_b
start r2ow-ref c; R3c=$PID_c
for s in a b c; do start $dir $s; done
lastround() { grep -o "round [0-9]* |" $dir/$1.log 2>/dev/null | tail -1 | grep -o "[0-9]*"; }
for _ in $(seq 1 1200); do
    r=$(lastround a)
    [[ $r -ge 3 && $(lastround b) == "$r" && $(lastround c) == "$r" ]] 2>/dev/null && break
    sleep 0.05
done
kill -USR1 $wan
t_cut=$(date +%s.%N) ra0=$(lastround a)
sleep 60
ra1=$(lastround a)
kill -USR2 $wan
t_heal=$(date +%s.%N)
kill -TERM $R3a $R3b $R3c # (the reference: its pace in the cut's time is what counts)
ra_heal=$(lastround a)
# c back: it commits a round after the heal's (up to 120 s), then all stop
# together (each finishes the round in progress with its peers and saves)
for _ in $(seq 1 1200); do
    [[ $(lastround c) -gt $ra_heal ]] 2>/dev/null && break
    sleep 0.1
done
sleep 0.5
kill -TERM $PID_a $PID_b $PID_c
rc=0
for s in a b c; do eval "await \$PID_$s 900" || rc=1; done
for p in $R3a $R3b $R3c; do await $p 120 || no "the reference run of 2ow did not stop: $(tail -n 2 r2ow-ref/*.log | head -4)"; done
kill $wan 2>/dev/null
# where each stopped: "ROUND:THETA" from its log's "stopped: saved round R (theta H)"
# (a stopped run writes no summary.json)
stopped_at() { grep -o "stopped: saved round [0-9]* (theta [0-9a-f]*)" $dir/$1.log | tail -1 | sed 's/.*round \([0-9]*\) (theta \([0-9a-f]*\))/\1:\2/'; }
ha=$(stopped_at a) hb=$(stopped_at b) hc=$(stopped_at c)
# a's commits inside the cut (from peer_timeout_s after it), against the reference's pace
in_cut() {
    python3 - $1 "$t_cut" "$t_heal" <<'PY'
import json, sys
lo, hi = float(sys.argv[2]) + 2, float(sys.argv[3])
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "round" and lo <= e["t"] <= hi:
        print(line, end="")
PY
}
in_cut $dir/run-a/events.jsonl >$dir.cut.jsonl
in_cut r2ow-ref/run-a/events.jsonl >$dir.ref.jsonl
pace=$(pace_of $dir.ref.jsonl $dir.cut.jsonl)
n_cut=$(wc -l <$dir.cut.jsonl)
forks=$(python3 - $dir <<'PY'
import json, sys
seen, bad = {}, 0
for s in "abc":
    for line in open(f"{sys.argv[1]}/run-{s}/events.jsonl"):
        e = json.loads(line)
        if e.get("event") == "round" and e.get("theta"):
            bad += seen.setdefault(e["round"], e["theta"]) != e["theta"]
print(bad)
PY
)
# the run went on after the heal (a's last round is past the one at the heal)
ra2=$(lastround a)
if [[ $rc -eq 0 && -n $ha && $ha == "$hb" && $ha == "$hc" && $forks == 0 && $ra1 -gt $ra0 && $ra2 -gt $ra1 ]] &&
    pace_holds "$pace" && grep -q "leaves out c: a site of a pair where one does not hear the other" $dir/b.log; then
    ok "one-way cut c->a for 60 s: a and b committed rounds $ra0..$ra1 ($n_cut in the cut) at pace $pace of a fault-free run, c left out alike by all; after the heal (to round $ra2) all three stop on round:theta $ha, one history"
else
    no "one-way cut: rc $rc, a rounds $ra0..$ra1..$ra2 ($n_cut in the cut), pace $pace, forks $forks, stopped at ${ha:-?} ${hb:-?} ${hc:-?}: $(grep -h 'leaves out\|error' $dir/*.log | head -4)"
fi

# ---- 3. exact resume ---------------------------------------------------------------
PORTS=($(port) $(port))
for s in a b; do PRESET=demo STEPS=150 H=50 conf r4 $s "a b"; done
run2 r4 || no "uninterrupted run failed: $(tail -n 2 r4/*.log)"
ref=$(hash_of r4/run-a/summary.json)
# The simulator shares the agents' commit path and codec (issue 17): two
# simulated sites with r4's settings, data and data order end on r4's theta.
"$bin" sim --json --sites 2 --policy fixed --correction autoloco --set policy.h_base=50 \
    --set model.preset=demo --set data.train="$tmp/data/train.bin" --set data.val="$tmp/data/val.bin" \
    --set inner.batch=4 --set inner.seq=32 --set inner.steps=150 --set inner.warmup=5 \
    --set inner.lr=1e-2 --set inner.threads=1 --set inner.eval_batches=4 \
    --codec int8+zstd --set outer.lr=0.7 --overlap "${AL_TEST_OVERLAP:-none}" \
    --set outer.fragments="${AL_TEST_FRAGMENTS:-16}" --set outer.overlap_steps="${AL_TEST_TAU:-half}" >sim.out 2>&1
sim_hash=$(tail -n 1 sim.out | python3 -c 'import json,sys; print(json.load(sys.stdin)["hash"])' 2>/dev/null)
if [[ -n $ref && $sim_hash == "$ref" ]]; then
    ok "a 2-site sim with the same settings ends on the 2-site agents' theta ($ref)"
else
    no "sim vs agents: sim $sim_hash, agents $ref: $(tail -n 2 sim.out)"
fi
# [outer] s_ref (issue 36): the agents read it as the simulator does. With
# fixed H = 50 the correction's S_r / S_ref is 1 at the default S_ref = h_base;
# at S_ref = 20 it is 2.5, so theta must change, and the sim must follow.
PORTS=($(port) $(port))
for s in a b; do S_REF=20 PRESET=demo STEPS=150 H=50 conf r4s $s "a b"; done
run2 r4s || no "s_ref run failed: $(tail -n 2 r4s/*.log)"
sref=$(hash_of r4s/run-a/summary.json)
"$bin" sim --json --sites 2 --policy fixed --correction autoloco --set policy.h_base=50 \
    --set model.preset=demo --set data.train="$tmp/data/train.bin" --set data.val="$tmp/data/val.bin" \
    --set inner.batch=4 --set inner.seq=32 --set inner.steps=150 --set inner.warmup=5 \
    --set inner.lr=1e-2 --set inner.threads=1 --set inner.eval_batches=4 \
    --codec int8+zstd --set outer.lr=0.7 --set outer.s_ref=20 --overlap "${AL_TEST_OVERLAP:-none}" \
    --set outer.fragments="${AL_TEST_FRAGMENTS:-16}" --set outer.overlap_steps="${AL_TEST_TAU:-half}" >sim-s.out 2>&1
sim_s=$(tail -n 1 sim-s.out | python3 -c 'import json,sys; print(json.load(sys.stdin)["hash"])' 2>/dev/null)
if [[ -n $sref && $sref != "$ref" && $sim_s == "$sref" ]]; then
    ok "[outer] s_ref = 20 in the agents: theta changes ($sref, not $ref) and a sim with it ends there too"
else
    no "s_ref: agents $sref (default $ref), sim $sim_s: $(tail -n 2 sim-s.out)"
fi
# The round records carry the hash each commit kept (the candidate's; with
# streaming rehashed on its fragment's chunks only, ag_cand_hash); the summary
# hashes theta_global afresh. The last round's must be the summary's.
last_theta() {
    python3 -c 'import json,sys
r = [json.loads(l) for l in open(sys.argv[1])]
print([x for x in r if x.get("event") == "round"][-1]["theta"])' "$1" 2>/dev/null
}
la=$(last_theta r4/run-a/events.jsonl) lb=$(last_theta r4/run-b/events.jsonl)
if [[ -n $ref && $la == "$ref" && $lb == "$ref" ]]; then
    ok "the hash kept by the last commit is theta_global's, hashed afresh ($ref)"
else
    no "kept hash vs fresh: last round records a $la, b $lb, summary $ref"
fi
# The signal at once after round 0's line lands in interval 1 (with overlap
# it trains already, beside round 0's vote), so both stop after round 1 and
# the resumed run trains round 2: the check below asks for a stop before the
# end (with 0.4 s the signal came in round 2's interval, the run's last, and
# the resume had nothing left to do).
# Sites stopped together resume exactly. A signal that lands between the two
# sites' commits of a round is not "together": one stops after it, the other
# goes on into the next round, cannot commit it alone, and stops before it
# commits, dropping steps whose effect on AdamW's moments stays (logged
# "stopping before round"; docs/ARCHITECTURE.md, test 3c). With streaming's
# short rounds that window is wide enough to be hit (2 runs in ~65 here, and
# every time with the signals 50 ms apart): such a stop is run once more.
for r5 in r5 r5b; do
    PORTS=($(port) $(port))
    for s in a b; do PRESET=demo STEPS=150 H=50 conf $r5 $s "a b"; done
    stop2 $r5 0 0 || no "SIGTERM did not end the agents with status 0"
    grep -q "stopping before round" $r5/a.log $r5/b.log || break
    echo "note: the stop straddled a commit ($(grep -h "stopping before round" $r5/a.log $r5/b.log | head -n 1)): once more"
done
at=$(sed -n 's/.*saved checkpoint .* (round \([0-9]*\), step.*/\1/p' $r5/a.log $r5/b.log | sort -u)
run2 $r5 resume || no "resumed run failed: $(tail -n 2 $r5/*.log)"
got=$(hash_of $r5/run-a/summary.json)
# (streaming: F protocol rounds to an outer round; the signal may land a few in)
Fs=1
[[ ${AL_TEST_OVERLAP:-} == streaming ]] && Fs=${AL_TEST_FRAGMENTS:-16}
if [[ $at =~ ^[0-9]+$ ]] && ((at < 3 * Fs)) && [[ -n $ref && $ref == "$got" && $(hash_of $r5/run-b/summary.json) == "$ref" ]] &&
    grep -q "resumed from" $r5/a.log; then
    ok "SIGTERM after $at of $((3 * Fs)) rounds + --resume: bit-identical to the uninterrupted run ($ref)"
else
    no "resume not exact: stopped at round(s) '$at', uninterrupted $ref, resumed $got"
    # what each site did at the stop (a checkpoint of a round that did not
    # commit, steps dropped: ag_bg_settle) and at the resume
    grep -hE "signal|stopping|dropping|saved checkpoint|resumed from" $r5/a.log $r5/b.log | sed 's/^/  /'
fi
# the counters continue across the resume: syncs, shard bytes before encoding
# and the DiLoCo/DDP equivalents equal the uninterrupted run's, per site; the
# bytes on the wire too, but for control traffic whose size depends on timing
# (the restart's handshake, state polls while a peer starts: tens of bytes
# either way, seen -13 and +93; counting from zero would be ~0.5 MB short)
python3 - r4 $r5 2>&1 <<'EOF' && ok "resume: syncs, bytes, DiLoCo/DDP equivalents continue (equal to the uninterrupted run's; wire bytes + one handshake)" ||
import json, sys
keys = ["syncs", "bytes_raw", "bytes_diloco_equiv", "bytes_ddp_equiv"]
for s in "ab":
    u = json.load(open(f"{sys.argv[1]}/run-{s}/summary.json"))
    r = json.load(open(f"{sys.argv[2]}/run-{s}/summary.json"))
    bad = [(k, u[k], r[k]) for k in keys if u[k] != r[k]]
    extra = {k: r[k] - u[k] for k in ["bytes_sent", "bytes_recv"]}
    print(f"  site {s}: " + ", ".join(f"{k} {r[k]:.0f}" for k in keys) + f"; wire bytes beyond the uninterrupted run's: {extra}")
    assert not bad and u["syncs"] > 0, f"site {s}: uninterrupted vs resumed differ: {bad}"
    assert all(abs(x) < 512 for x in extra.values()), f"site {s}: wire bytes {extra}"
EOF
    no "resume: counters differ from the uninterrupted run"

# ---- 3b. exact resume with 2 workers per site (issue 13) ---------------------------
# The checkpoint holds the workers' data position and the engine's step, and a
# resumed site forks its workers after loading it. Small: tiny, 4 rounds. Each
# interval (250 steps, ~0.75 s) is long against the time the signal takes to
# follow the round 0 line, so both sites get it in round 1; with short rounds
# (30 steps) it once landed after one site's commit and before the other's,
# and they stopped a round apart.
PORTS=($(port) $(port))
for s in a b; do WORKERS=2 STEPS=1000 H=250 conf r4w $s "a b"; done
run2 r4w || no "W=2: uninterrupted run failed: $(tail -n 2 r4w/*.log)"
ref=$(hash_of r4w/run-a/summary.json)
PORTS=($(port) $(port))
for s in a b; do WORKERS=2 STEPS=1000 H=250 conf r5w $s "a b"; done
stop2 r5w 0 0 || no "W=2: SIGTERM did not end the agents with status 0"
# both saved after the same round, before the last
at=$(sed -n 's/.*saved checkpoint .* (round \([0-9]*\), step.*/\1/p' r5w/a.log r5w/b.log | sort -u)
run2 r5w resume || no "W=2: resumed run failed: $(tail -n 2 r5w/*.log)"
got=$(hash_of r5w/run-a/summary.json)
# (streaming: a round is a span of H/F steps)
Fw=1
[[ ${AL_TEST_OVERLAP:-} == streaming ]] && Fw=${AL_TEST_FRAGMENTS:-16}
# The resumed step: inside round $at's interval, from its start to its end
# (a stop cuts the interval after the step in progress and saves it as it
# stands; --resume trains the rest), or, with overlap, its end when the
# signal found it training (it runs to its end and is saved "trained":
# agent.json's overlap_interval)
span_at() { echo $(($1 / Fw * 250 + 250 * ($1 % Fw) / Fw)); }
rstep=$(sed -n 's/.*resumed from .* at round [0-9]*, step \([0-9]*\)$/\1/p' r5w/a.log | head -n 1)
steps_ok="$(span_at ${at:-0})..$(span_at $((${at:-0} + 1)))"
if [[ $at =~ ^[0-9]+$ ]] && ((at < 4 * Fw)) && [[ -n $ref && $got == "$ref" && $(hash_of r5w/run-b/summary.json) == "$ref" ]] &&
    [[ $(grep -c "2 workers forked once (process threads: 1)" r5w/a.log) -eq 2 ]] &&
    grep -qE "resumed from .* at round $at, step [0-9]+\$" r5w/a.log &&
    ((rstep >= $(span_at $at) && rstep <= $(span_at $((at + 1))))); then
    ok "W=2: stopped by SIGTERM after $at rounds of $((4 * Fw)), resumed: theta $got, as uninterrupted ($ref)"
else
    no "W=2 resume not exact: stopped at round(s) '$at', uninterrupted $ref, resumed $got $(hash_of r5w/run-b/summary.json), $(grep -c 'workers forked once' r5w/a.log) forks, $(grep -h 'resumed from' r5w/a.log | head -1), steps asked: $steps_ok"
fi

# ---- 3c. overlap: a stop before the round commits -----------------------------------
# Overlap only. b freezes when its interval 1 ends, so round 1 cannot commit
# (quorum majority of two); a has merged interval 1 and started interval 2
# from the eager guess built on it. A SIGTERM to a then ends it after the
# deadlines with round 1 uncommitted (it once waited for ever: interval 2,
# ended on its thread, was never joined): its checkpoint must hold interval 1
# as it ended (not interval 2's guessed start under round 1's number, which a
# resume refused). b saves every round; both resumed, they finish on one theta.
# (b's interval 1 ends on its thread while round 0 is voted: on a loaded
# machine b froze once before its round 0 vote reached a, a never committed
# round 0 and the stop came before round 0 instead. That misses the case, not
# the property: it runs once more, and a second miss fails below.)
for try in 1 2; do
  if [[ ${AL_TEST_OVERLAP:-none} != none ]]; then
    dir=r5c$try
    PORTS=($(port) $(port))
    STEPS=60 H=10 DEADLINE=2 HB=0.5 PT=2 conf $dir a "a b"
    EVERY=1 STEPS=60 H=10 DEADLINE=2 HB=0.5 PT=2 conf $dir b "a b"
    start $dir a
    AL_FAULT=freeze:1 start $dir b
    for _ in $(seq 1 1200); do [[ $(ps -o stat= -p "$PID_b") == T* ]] && break; sleep 0.05; done
    # (b froze after its round 0 commit; a's may come a moment later)
    for _ in $(seq 1 200); do grep -q "round 0 |" $dir/a.log && break; sleep 0.05; done
    if [[ $try == 1 ]] && ! grep -q "round 0 |" $dir/a.log; then
        echo "note: b froze before a committed round 0: the case again"
        kill -KILL "$PID_a" "$PID_b" 2>/dev/null
        kill -CONT "$PID_b" 2>/dev/null
        wait "$PID_a" "$PID_b" 2>/dev/null
        continue
    fi
    kill -TERM "$PID_a"
    rc=0
    await "$PID_a" 60 || rc=1
    kill -KILL "$PID_b" 2>/dev/null
    kill -CONT "$PID_b" 2>/dev/null
    wait "$PID_b" 2>/dev/null
    saved=$(sed -n 's/.*saved checkpoint .* (round \([0-9]*\), step.*/\1/p' $dir/a.log)
    start $dir a --resume $dir/run-a
    start $dir b --resume $dir/run-b
    await "$PID_a" 120 || rc=2
    await "$PID_b" 120 || rc=3
    ha=$(hash_of $dir/run-a/summary.json)
    if [[ $rc -eq 0 && $saved == 1 && -n $ha && $ha == "$(hash_of $dir/run-b/summary.json)" ]] &&
        grep -q "stopping before round 1 committed" $dir/a.log && grep -q "resumed from .* at round 1" $dir/a.log; then
        ok "overlap: stopped before round 1 committed, saved interval 1 as it ended; both resumed, they end on one theta, $ha"
    else
        no "overlap stop before commit: rc $rc, saved round '$saved': $(grep -h 'error\|stopping\|resumed\|saved' $dir/a.log | head -5)"
    fi
  fi
  break
done

# ---- 3d. streaming: a merge that meets a non-finite value ---------------------------
# Streaming only. AL_FAULT=nanmerge:3 puts a NaN in the span start a merges
# round 3's fragment against: the merge refuses it, a resets theta_local to
# theta_global (the committed state, finite) with a warning and trains on;
# theta_global never saw the NaN, so both sites end on one theta.
if [[ ${AL_TEST_OVERLAP:-none} == streaming ]]; then
    dir=r5d
    PORTS=($(port) $(port))
    for s in a b; do STEPS=60 H=10 conf $dir $s "a b"; done
    AL_FAULT=nanmerge:3 start $dir a
    start $dir b
    rc=0
    await "$PID_a" 300 || rc=1
    await "$PID_b" 300 || rc=2
    ha=$(hash_of $dir/run-a/summary.json)
    if [[ $rc -eq 0 && -n $ha && $ha == "$(hash_of $dir/run-b/summary.json)" ]] &&
        grep -q "round [0-9]*: merging fragment [0-9]*: merge: a non-finite value at index .*; theta_local reset to theta_global" $dir/a.log &&
        ! grep -q "non-finite" $dir/b.log; then
        ok "streaming: a non-finite merge resets theta_local to theta_global and the run goes on; both end on ${ha:0:12}"
    else
        no "streaming non-finite merge: rc $rc, hashes ${ha:0:8} $(hash_of $dir/run-b/summary.json | head -c 8): $(grep -h 'merging\|error' $dir/a.log | head -3)"
    fi
fi

# ---- 4. bad input ------------------------------------------------------------------
# The checkpoints the checks below damage come from two short runs of this
# section's own (so that it runs apart from the others): r4ck, two sites of
# the demo preset saving every round, and r4ckw, two tiny sites of 2 workers;
# r4tiny/a.ini is a tiny site's configuration.
PORTS=($(port) $(port))
for s in a b; do PRESET=demo STEPS=30 H=10 EVERY=1 conf r4ck $s "a b"; done
start r4ck a
start r4ck b
ck_pids=("$PID_a" "$PID_b")
PORTS=($(port) $(port))
for s in a b; do WORKERS=2 STEPS=20 H=10 EVERY=1 conf r4ckw $s "a b"; done
conf r4tiny a "a b"
start r4ckw a
start r4ckw b
for p in "${ck_pids[@]}" "$PID_a" "$PID_b"; do
    await "$p" 300 || no "section 4's checkpoint runs failed: $(tail -n 2 r4ck/*.log r4ckw/*.log)"
done
# expect_err STATUS PATTERN -- CMD...: one error line matching PATTERN
expect_err() {
    local pat=$1
    shift 2
    local out
    out=$(timeout 60 "$@" 2>&1 >/dev/null)
    local rc=$?
    if [[ $rc -eq 1 && $(grep -c '^autoloco: error:' <<<"$out") -ge 1 ]] && grep -qE -- "$pat" <<<"$out"; then
        ok "error: $(grep '^autoloco: error:' <<<"$out" | head -c 170)"
    else
        no "expected /$pat/, got status $rc: $(tail -n 2 <<<"$out")"
    fi
}
PORTS=($(port) $(port))
conf r6 a "a b"
cp r6/a.ini r6/bad.ini
printf '[peers]\nb = nowhere\n' >>r6/bad.ini
expect_err "bad.ini:[0-9]+: \[peers\] b: 'nowhere' is not host:port" -- "$bin" config check r6/bad.ini
sed 's/^name = fixed/name = sometimes/' r6/a.ini >r6/bad2.ini
expect_err "bad2.ini:[0-9]+: \[policy\] name" -- "$bin" config check r6/bad2.ini
sed 's/^codec = int8+zstd/codec = int3/' r6/a.ini >r6/bad3.ini
expect_err "\[outer\] codec.*int3" -- "$bin" config check r6/bad3.ini
sed 's#^cert = .*#cert = /nonexistent.pem#' r6/a.ini >r6/bad4.ini
expect_err "\[tls\] cert: '/nonexistent.pem' is missing" -- "$bin" config check r6/bad4.ini
sed 's/^name = a$/name = no\/slash/' r6/a.ini >r6/bad5.ini
expect_err "\[site\] name: 'no/slash' is not a valid site name" -- "$bin" config check r6/bad5.ini
sed 's/^lr = 0.7$/lr = fast/' r6/a.ini >r6/bad6.ini
expect_err "bad6.ini:[0-9]+: \[outer\] lr: 'fast' is not a number" -- "$bin" config check r6/bad6.ini
sed 's/^\[outer\]$/[outer]\nmax_delta_ratio = 0.5/' r6/a.ini >r6/bad7.ini
expect_err "\[outer\] max_delta_ratio: 0.5 would leave out the median site itself" -- "$bin" config check r6/bad7.ini
sed 's/^\[round\]$/[round]\nheartbeat_s = 2\npeer_timeout_s = 3/' r6/a.ini >r6/bad8.ini
expect_err "\[round\] peer_timeout_s: 3 s is less than two heartbeats \(heartbeat_s = 2 s\)" -- "$bin" config check r6/bad8.ini
sed 's/^overlap = .*/overlap = delayed-mean/' r6/a.ini >r6/bad9.ini
expect_err "\[outer\] overlap: 'delayed-mean' is not one of none\|delayed\|delayed-mid\|streaming" -- "$bin" config check r6/bad9.ini
sed 's/^\[outer\]$/[outer]\nfragments = 0/' r6/a.ini >r6/bad10.ini
expect_err "\[outer\] fragments: 0 is out of range" -- "$bin" config check r6/bad10.ini
sed 's/^overlap_steps = .*/overlap_steps = later/' r6/a.ini >r6/bad11.ini
expect_err "bad11.ini:[0-9]+: \[outer\] overlap_steps: 'later' is not one of half\|sync" -- "$bin" config check r6/bad11.ini
# a peer with another run configuration
conf r7 a "a b"
OUTER_LR=0.5 conf r7 b "a b"
start r7 a
for _ in $(seq 1 300); do grep -q listening r7/a.log 2>/dev/null && break; sleep 0.1; done
# whichever side shakes hands first refuses, naming the other
out=$(timeout 60 "$bin" agent -c r7/b.ini 2>&1)
rc=$?
# (a refusing site ends at once; a refused one waits on for a peer that fits)
await "$PID_a" 5
# (the refusal names the key and both values: 0.5 at b, 0.7 at a)
if [[ $rc -ne 0 ]] && grep -qE "site (a runs a different configuration: \[outer\] lr is 0.7 there, 0.5 here|b runs a different configuration: \[outer\] lr is 0.5 there, 0.7 here) \(run hash" <<<"$out
$(cat r7/a.log)"; then
    ok "a peer with another run configuration is refused, naming the key: $(printf '%s\n%s\n' "$out" "$(cat r7/a.log)" | grep -o 'site . runs a different configuration: [^(]*' | head -n 1)"
else
    no "config hash mismatch: b status $rc: $out $(tail -n 2 r7/a.log)"
fi
# a certificate for an unlisted site
PORTS=($(port) $(port))
conf r8 a "a b"
CERT=mallory conf r8 b "a b"
start r8 a
expect_err "PERMISSION_DENIED" -- "$bin" agent -c r8/b.ini
kill "$PID_a" 2>/dev/null
# fewer sites than [round] min_sites: the agent waits rather than trains, and
# SIGTERM ends the wait cleanly
PORTS=($(port) $(port))
DEADLINE=2 conf r9 a "a b"
sed -i 's/^\[round\]$/[round]\nmin_sites = 2/' r9/a.ini
start r9 a
# (it decides after one deadline, 2 s, and says so; a moment later it still waits)
for _ in $(seq 1 300); do grep -q "waiting for \[round\] min_sites" r9/a.log 2>/dev/null && break; sleep 0.1; done
sleep 1
kill -TERM "$PID_a"
await "$PID_a" 20
rc=$?
if [[ $rc -eq 0 ]] && grep -q "waiting for \[round\] min_sites = 2" r9/a.log && ! grep -q "round 0 |" r9/a.log; then
    ok "below [round] min_sites the agent waits (no training), SIGTERM ends it with status 0"
else
    no "min_sites wait: status $rc: $(tail -n 3 r9/a.log)"
fi
# SIGTERM while joining: c finds a and b ahead and pulls their state; then a
# and b freeze (SIGSTOP). SIGTERM ends c with status 0 once the pull in flight
# gives up (3 tries of deadline_s), or, if the pull was done, once the round
# it cannot commit alone has had its time (2 deadlines + peer_timeout_s);
# before, it waited out the join's timeout (4 deadlines + 60 s) and exited 1.
# (deadline_s 3 s, unless a sanitized run asks for more.) The bound is that
# timeout less 15 s: on a loaded machine (sections side by side beside a
# build) the pull finished before the freeze, c trained a round and waited
# its 2 deadlines + peer_timeout_s, and exited 0 after 36 s, against 1 s
# here when idle and 16 s under three busy loops.
jd=${AL_TEST_DEADLINE:-3}
PORTS=($(port) $(port) $(port))
for s in a b c; do STEPS=4000 DEADLINE=$jd conf r9j $s "a b c"; done
start r9j a
start r9j b
for _ in $(seq 1 600); do grep -q "round 2 |" r9j/a.log 2>/dev/null && break; sleep 0.1; done
start r9j c
for _ in $(seq 1 600); do grep -q "pulling the committed state" r9j/c.log 2>/dev/null && break; sleep 0.05; done
kill -STOP "$PID_a" "$PID_b"
sleep 1
kill -TERM "$PID_c"
tj=$(date +%s)
await "$PID_c" $((4 * jd + 60))
rc=$?
tj=$(($(date +%s) - tj))
kill -KILL "$PID_a" "$PID_b" 2>/dev/null
kill -CONT "$PID_a" "$PID_b" 2>/dev/null
if [[ $rc -eq 0 ]] && grep -q "pulling the committed state from" r9j/c.log && ((tj <= 4 * jd + 45)); then
    ok "SIGTERM while joining: c ends with status 0 after ${tj} s"
else
    no "SIGTERM while joining: status $rc after ${tj} s: $(tail -n 3 r9j/c.log)"
fi

# a checkpoint whose counters are malformed (with a matching SHA-256, so it
# passes the integrity check) is refused with the counter's name
mkdir -p r5bad
cp -r "$(ls -d r4ck/run-b/step-* | sort | tail -n 1)" r5bad/
/usr/bin/python3 - r5bad/step-* <<'EOF'
import hashlib, json, sys
d = sys.argv[1]
a = json.load(open(f"{d}/agent.json"))
a["counters"]["autoloco_syncs_total"] = -3
open(f"{d}/agent.json", "w").write(json.dumps(a))
m = json.load(open(f"{d}/manifest.json"))
m["files"]["agent.json"] = hashlib.sha256(open(f"{d}/agent.json", "rb").read()).hexdigest()
open(f"{d}/manifest.json", "w").write(json.dumps(m))
EOF
expect_err "counter autoloco_syncs_total: not a finite number >= 0" -- "$bin" agent -c r4ck/b.ini --resume r5bad

# [outer] overlap's record of the next interval (agent.json overlap_interval):
# refused by a configuration without overlap, and refused when malformed
# (both with a matching SHA-256, as above)
ovck() { # ovck DIR STATE -- r4ck/run-b's newest checkpoint into DIR with that record
    mkdir -p "$1"
    cp -r "$(ls -d r4ck/run-b/step-* | sort | tail -n 1)" "$1/"
    /usr/bin/python3 - "$1"/step-* "$2" <<'EOF2'
import hashlib, json, sys
d = sys.argv[1]
a = json.load(open(f"{d}/agent.json"))
a["overlap_interval"] = {"round": a["round"], "h": 50, "state": sys.argv[2]}
open(f"{d}/agent.json", "w").write(json.dumps(a))
m = json.load(open(f"{d}/manifest.json"))
m["files"]["agent.json"] = hashlib.sha256(open(f"{d}/agent.json", "rb").read()).hexdigest()
open(f"{d}/manifest.json", "w").write(json.dumps(m))
EOF2
}
ovck r5ov pending
expect_err "saved with \[outer\] overlap on .*this configuration has overlap = none" -- \
    "$bin" agent -c r4ck/b.ini --resume r5ov --set outer.overlap=none
ovck r5ovbad halfway
expect_err "overlap_interval: expected .*pending.*trained" -- \
    "$bin" agent -c r4ck/b.ini --resume r5ovbad --set outer.overlap=delayed
# "trained" without the interval's start beside it (interval_start.bin)
ovck r5ovtr trained
expect_err "interval_start.bin" -- "$bin" agent -c r4ck/b.ini --resume r5ovtr --set outer.overlap=delayed

# [outer] overlap = streaming's schedule (agent.json "stream"): refused by a
# configuration without it, required by one with it, and checked
stck() { # stck DIR JSON -- r4ck/run-b's newest checkpoint into DIR, "stream" set to JSON (null: none)
    mkdir -p "$1"
    cp -r "$(ls -d r4ck/run-b/step-* | sort | tail -n 1)" "$1/"
    /usr/bin/python3 - "$1"/step-* "$2" <<'EOF2'
import hashlib, json, sys
d = sys.argv[1]
a = json.load(open(f"{d}/agent.json"))
a.pop("stream", None)
a.pop("overlap_interval", None)
if json.loads(sys.argv[2]) is not None:
    a["stream"] = json.loads(sys.argv[2])
open(f"{d}/agent.json", "w").write(json.dumps(a))
m = json.load(open(f"{d}/manifest.json"))
m["files"]["agent.json"] = hashlib.sha256(open(f"{d}/agent.json", "rb").read()).hexdigest()
open(f"{d}/manifest.json", "w").write(json.dumps(m))
EOF2
}
good='{"fragments": 2, "sr_step": 0, "lr_cum": 0.0, "lr_at": [0.0, 0.0], "step_at": [0, 0], "fsq": [0.0, 0.0], "comm_prev": 0.0, "comm_cur": 0.0, "sum": [0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0], "pend": [-1, 0, 0]}'
stck r5st "$good"
expect_err "saved with \[outer\] overlap = streaming; this configuration has overlap = none" -- \
    "$bin" agent -c r4ck/b.ini --resume r5st --set outer.overlap=none
expect_err "saved with 2 fragments, \[outer\] fragments is 16" -- \
    "$bin" agent -c r4ck/b.ini --resume r5st --set outer.overlap=streaming --set outer.fragments=16
stck r5stnone null
expect_err "'stream': missing or malformed \(overlap = streaming\)" -- \
    "$bin" agent -c r4ck/b.ini --resume r5stnone --set outer.overlap=streaming --set outer.fragments=2
stck r5stbad "${good/0], \"fsq/-5], \"fsq}"
expect_err "'stream': fragment 1: lr_at, step_at \(>= 0\) and fsq must be numbers" -- \
    "$bin" agent -c r4ck/b.ini --resume r5stbad --set outer.overlap=streaming --set outer.fragments=2

# a 2-worker site refuses a checkpoint without the workers' state (one written
# before it was saved: its data position is not theirs), naming the manifest
mkdir -p r5wold
cp -r "$(ls -d r4ckw/run-a/step-* | sort | tail -n 1)" r5wold/
python3 - r5wold/step-* <<'EOF'
import json, sys
f = sys.argv[1] + "/manifest.json"
m = json.load(open(f))
del m["workers"]
json.dump(m, open(f, "w"))
EOF
expect_err "r5wold/step-[0-9]+/manifest.json: no worker state .*cannot resume 2 workers exactly" -- "$bin" agent -c r4ckw/a.ini --resume r5wold

# checkpoints: a flipped bit falls back to the previous one; another preset is refused
# (a copy of r4ck/run-a's checkpoints, resumed into its own folder: without
# r4ck/run-a's vote.json, whose vote for the last round, found again with
# quorum = any, would have this lone site wait for that round's state from a
# peer until the timeout)
ck=r4corrupt
mkdir -p $ck
cp -r r4ck/run-a/step-* $ck/
last=$(ls -d $ck/step-* | sort | tail -n 1)
python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(3000); b=f.read(1); f.seek(3000); f.write(bytes([b[0]^1]))' "$last/model.safetensors"
timeout 300 "$bin" agent -c r4ck/a.ini --resume $ck --set checkpoint.dir=$ck --set round.deadline_s=1 --set round.quorum=any >r6/resume.log 2>&1
if grep -q "skipping checkpoint .*SHA-256 mismatch" r6/resume.log && grep -q "resumed from" r6/resume.log &&
    [[ $(ls -d $ck/step-* | wc -l) -ge 2 ]]; then
    ok "corrupt newest checkpoint: skipped with a warning, resumed from the previous one"
else
    no "corrupt checkpoint: $(head -n 4 r6/resume.log)"
fi
expect_err "checkpoint of preset 'demo'" -- "$bin" agent -c r4tiny/a.ini --resume $ck --set round.deadline_s=1


# ---- 5. disk: a run that never checkpoints keeps a bounded hard state (issue 31) --------
# Each commit writes commit-R.bin (theta at the start of round R) so a resume
# can replay from the newest checkpoint; the log keeps 64 rounds since it, so
# older files are dropped as the log moves on, not only at a checkpoint: 80
# rounds with [checkpoint] every_rounds = 0 leave at most 65 on each site.
PORTS=($(port) $(port))
for s in a b; do STEPS=800 H=10 conf r5 $s "a b"; done
run2 r5 || no "the 80-round run failed: $(tail -n 2 r5/*.log)"
na=$(ls r5/run-a | grep -c '^commit-') nb=$(ls r5/run-b | grep -c '^commit-')
last=$(ls r5/run-a | grep '^commit-' | tail -n 1)
if [[ $na -ge 1 && $na -le 65 && $nb -le 65 && $last == commit-00000080.bin ]]; then
    ok "80 rounds without checkpoints: $na and $nb commit files kept (the log's 64 rounds and the current), the newest $last"
else
    no "commit files after 80 rounds: a $na, b $nb, newest $last"
fi

al_test_end
