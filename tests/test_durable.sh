#!/usr/bin/env bash
# test_durable.sh AUTOLOCO -- durable rounds (issue 31): the round protocol's
# hard state (hard.json, candidate.bin, commit-R.bin in the checkpoint folder,
# runtime/agent/agent_hard.c) lets a run survive a power cut of every site:
#   1. whole-run kills: three sites, all SIGKILLed at the same instant at five
#      named moments of one run (while training, exchanging, voting, applying
#      a commit and saving a checkpoint), all resumed with --resume each time:
#      the run finishes on the θ hash of the same run never interrupted, and
#      no round is committed with two θ in any site's event log;
#   2. a hard-state file that exists but does not parse (truncated, garbage):
#      the agent refuses to start, naming the file and what to do;
#   3. restarts from a checkpoint older than the last vote (the hard state on
#      disk as the site wrote it, newer than the checkpoint: the resume
#      reconciles): one site of two (3a), one of three (3b), two of three
#      while the third is frozen by SIGSTOP and then released (3c). Every site
#      finishes on one theta, no round is committed with two theta in any log
#      or event log, and no running site is silent for more than 2 x
#      peer_timeout_s (its log lines are timestamped as they come);
#   4. a sync source that serves less than it announced: b, restarted behind
#      while c is frozen, pulls from a, which serves half its state
#      (AL_FAULT=badstate): a is not asked again for that state, and with no
#      other source b goes back to the round after 5 heartbeats, saying so;
#      once c is released b takes its state and all three end on one theta.
# AL_TEST_SECTIONS picks sections (default "1 2 3 4"; meson: durable runs 1 2,
# durable_stale 3 4).
# The moments come from AL_FAULT=pause:MOMENT:R on site a (it stops itself
# there with SIGSTOP and says so); the test then kills a, b and c with one
# kill(1). Every wait is bounded; nothing is left running.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/shell_lib.sh"
al_test_start test-durable "${1:-}"
sections=" ${AL_TEST_SECTIONS:-1 2 3 4} "
want() { [[ $sections == *" $1 "* ]]; }

al_test_run_dir a,b,c

# conf DIR SITE "SITES" -- DIR/SITE.ini (the pattern of test_agent.sh's conf)
conf() {
    local dir=$1 me=$2 sites=$3 i=0 s
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
            [[ $s != "$me" ]] && echo "$s = 127.0.0.1:${PORTS[$i]}"
            i=$((i + 1))
        done
        echo "[tls]"
        echo "ca = $tmp/certs/ca.pem"
        echo "cert = $tmp/certs/$me.pem"
        echo "key = $tmp/certs/$me.key"
        echo "[model]"
        echo "preset = tiny"
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
        echo "eval_every = 0"
        echo "eval_batches = 4"
        echo "[outer]"
        echo "codec = int8+zstd"
        echo "lr = 0.7"
        echo "[policy]"
        echo "name = fixed"
        echo "h_base = ${H:-5}"
        echo "[round]"
        echo "deadline_s = ${AL_TEST_DEADLINE:-5}"
        echo "heartbeat_s = 0.25"
        echo "peer_timeout_s = 2"
        echo "[checkpoint]"
        echo "dir = $dir/run-$me"
        echo "every = ${EVERY:-1}"
        echo "keep = ${KEEP:-3}"
    } >"$dir/$me.ini"
}

# await_line FILE TEXT SECONDS -- wait until FILE has a line with TEXT
await_line() {
    local f=$1 text=$2 t=$3 i
    for ((i = 0; i < t * 10; i++)); do
        grep -qF -- "$text" "$f" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# no_double_commit DIR -- no round has two θ in any site's event log
no_double_commit() {
    python3 - "$1" <<'EOF'
import json, sys, glob
seen, bad = {}, []
for f in glob.glob(sys.argv[1] + "/run-*/events.jsonl"):
    for line in open(f):
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a line cut by a SIGKILL
        if "round" in e and "theta" in e:
            t = seen.setdefault(e["round"], e["theta"])
            if t != e["theta"]:
                bad.append((f, e["round"], t, e["theta"]))
for b in bad:
    print("round %s committed twice: %s" % (b[1], b))
sys.exit(1 if bad else 0)
EOF
}

# ---- 1. whole-run kills at five named moments --------------------------------------
if want 1; then
PORTS=($(port) $(port) $(port))
for s in a b c; do conf ref $s "a b c"; done
for s in a b c; do start ref $s; done
for s in a b c; do eval "await \$PID_$s 240" || no "reference run: site $s failed"; done
href=$(hash_of ref/run-a/summary.json)
[[ -n $href && $href == $(hash_of ref/run-b/summary.json) && $href == $(hash_of ref/run-c/summary.json) ]] &&
    ok "reference run: every site on theta ${href:0:12}" || no "reference run: hashes differ"

for s in a b c; do conf k $s "a b c"; done
resume=
for moment in train:1 exchange:2 vote:3 apply:4 ckpt:6; do
    echo "==== $moment" >>k/a.log
    export AL_FAULT=pause:$moment
    if [[ -n $resume ]]; then start k a --resume k/run-a; else start k a; fi
    unset AL_FAULT
    for s in b c; do
        if [[ -n $resume ]]; then start k $s --resume k/run-$s; else start k $s; fi
    done
    if await_line k/a.log "fault: paused at ${moment%%:*} of round ${moment##*:}" 120; then
        kill -KILL $PID_a $PID_b $PID_c # the power cut: every site at once
        ok "all three sites killed at the same instant while at ${moment%%:*} of round ${moment##*:}"
    else
        no "site a never reached ${moment%%:*} of round ${moment##*:}"
        tail -5 k/a.log
        kill -KILL $PID_a $PID_b $PID_c
    fi
    for s in a b c; do eval "wait \$PID_$s" 2>/dev/null; done
    resume=1
done
for s in a b c; do start k $s --resume k/run-$s; done
for s in a b c; do eval "await \$PID_$s 240" || no "the resumed run: site $s failed"; done
for s in a b c; do
    h=$(hash_of k/run-$s/summary.json)
    [[ -n $h && $h == "$href" ]] && ok "site $s ends on the uninterrupted run's theta after 5 whole-run kills" ||
        no "site $s ends on theta '${h:0:12}', not ${href:0:12}"
done
grep -h "replaying\|holding the candidate\|hard state" k/*.log | sort | uniq -c | head -20
no_double_commit k && ok "no round committed with two theta" || no "a round committed twice"
fi

# ---- 2. a hard state that does not parse ---------------------------------------------
if want 2; then
STEPS=10
for s in a b c; do conf bad $s "a b c"; done
for s in a b c; do start bad $s; done
for s in a b c; do eval "await \$PID_$s 120" || no "short run: site $s failed"; done
hj=bad/run-a/hard.json
if [[ -s $hj ]]; then
    cp $hj hard.good
    head -c 40 hard.good >$hj # torn mid-write (as a file overwritten in place would be)
    "$bin" agent -c bad/a.ini --resume bad/run-a >trunc.log 2>&1
    rc=$?
    [[ $rc -ne 0 ]] && grep -q "hard.json" trunc.log && grep -q "Restore the file" trunc.log &&
        ok "a truncated hard.json stops the agent, naming it" || { no "truncated hard.json: rc $rc"; cat trunc.log | tail -3; }
    sed 's/"committed": [0-9]*/"committed": 1/' hard.good >$hj # edited: the checksum differs
    "$bin" agent -c bad/a.ini --resume bad/run-a >garbage.log 2>&1
    rc=$?
    [[ $rc -ne 0 ]] && grep -q "hard.json: its checksum does not match" garbage.log &&
        ok "an edited hard.json stops the agent, naming it" || { no "edited hard.json: rc $rc"; tail -3 garbage.log; }
    head -c 3000 /dev/urandom >$hj
    "$bin" agent -c bad/a.ini --resume bad/run-a >rand.log 2>&1
    rc=$?
    [[ $rc -ne 0 ]] && grep -q "hard.json: not JSON" rand.log &&
        ok "a garbage hard.json stops the agent, naming it" || { no "garbage hard.json: rc $rc"; tail -3 rand.log; }
else
    no "no hard.json after a run"
fi
unset STEPS
fi

# ---- 3. restarts from checkpoints older than the last vote ---------------------------
# start_ts DIR SITE LOG [ARGS...] -- an agent whose lines go to DIR/LOG stamped
# with the time they came (the silent-wait check reads the stamps)
start_ts() {
    local dir=$1 me=$2 log=$3
    shift 3
    "$bin" agent -c "$dir/$me.ini" "$@" > >(perl -MTime::HiRes=time -ne '$|=1; printf "%.3f %s", time, $_' >>"$dir/$log") 2>&1 &
    pids+=($!)
    eval "PID_$me=$!"
}

# ckpt_at DIR SITE LOG ROUND -- wait until SITE saved a checkpoint at ROUND or
# later; print the checkpoint's folder
ckpt_at() {
    local dir=$1 me=$2 log=$3 r=$4 i line
    for ((i = 0; i < 1200; i++)); do
        line=$(grep -o "saved checkpoint [^ ]* (round [0-9]*" "$dir/$log" 2>/dev/null |
            awk -v r="$r" '{ n = $5 + 0; if (n >= r) { print $3; exit } }')
        [[ -n $line ]] && { echo "$line"; return 0; }
        sleep 0.1
    done
    return 1
}

# stale_check DIR T [FROZEN_SITE FREEZE_FROM FREEZE_TO] -- no round with two
# theta in any log or event log; no log silent for more than 2 x T while its
# process ran (the frozen site's freeze aside)
stale_check() {
    python3 - "$@" <<'EOF'
import glob, json, re, sys
d, T = sys.argv[1], float(sys.argv[2])
frozen = sys.argv[3] if len(sys.argv) > 3 else "-"
f0, f1 = (float(sys.argv[4]), float(sys.argv[5])) if len(sys.argv) > 5 else (0, 0)
bad, seen = [], {}
def commit(src, r, t):
    t = t[:12]  # the log lines show 12 hex digits
    t0 = seen.setdefault(r, (t, src))
    if t0[0] != t:
        bad.append("round %s committed with two theta: %s (%s) and %s (%s)" % (r, t0[0], t0[1], t, src))
for f in glob.glob(d + "/run-*/events.jsonl"):
    for line in open(f):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if "round" in e and "theta" in e:
            commit(f, e["round"], e["theta"])
rx = re.compile(r"round (\d+)\b.*\btheta ([0-9a-f]{12,})")
for f in sorted(glob.glob(d + "/*.tlog")):
    prev, worst = None, (0, "")
    for line in open(f, errors="replace"):
        ts, _, text = line.partition(" ")
        try:
            t = float(ts)
        except ValueError:
            continue
        m = rx.search(text)
        if m and "done:" not in text:
            commit(f, int(m.group(1)), m.group(2))
        if prev is not None:
            gap = t - prev[0]
            in_freeze = f.split("/")[-1].startswith(frozen + ".") and prev[0] < f1 and t > f0
            if gap > worst[0] and not in_freeze:
                worst = (gap, prev[1].strip()[:160])
        prev = (t, text)
    print("%s: longest silence %.1f s, after: %s" % (f.split("/")[-1], worst[0], worst[1]))
    if worst[0] > 2 * T:
        bad.append("%s silent for %.1f s (> 2 x peer_timeout_s = %.0f s) after: %s" % (f, worst[0], 2 * T, worst[1]))
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
}

# restore DIR SITE SAVED -- the site's checkpoints replaced by the one kept
# aside; hard.json, commit-*.bin, candidate.bin stay as the site wrote them
restore() {
    rm -rf "$1/run-$2"/step-*
    cp -a "$3" "$1/run-$2/"
}

# same_theta DIR SITES... -- every site's summary on one theta (printed)
same_theta() {
    local d=$1 s h h0=
    shift
    for s in "$@"; do
        h=$(hash_of "$d/run-$s/summary.json")
        [[ -n $h ]] || return 1
        [[ -z $h0 ]] && h0=$h
        [[ $h == "$h0" ]] || return 1
    done
    echo "${h0:0:12}"
}

if want 3 || want 3a || want 3b || want 3c; then
T=2 # the conf's peer_timeout_s
STEPS=80
H=5
EVERY=1
KEEP=100 # round 3's checkpoint is still there when the test copies it aside
# 3a, 3b: site a of SITES restarted at round 8 from round 3's checkpoint
for case in "3a|a b" "3b|a b c"; do
    name=${case%%|*}
    sites=${case#*|}
    want 3 || want $name || continue
    d=$name
    PORTS=($(port) $(port) $(port))
    for s in $sites; do conf $d $s "$sites"; done
    for s in $sites; do start_ts $d $s $s.1.tlog; done
    if ck=$(ckpt_at $d a a.1.tlog 3); then
        cp -a "$ck" $d/saved
        mv $d/saved "$d/$(basename "$ck")"
        ckpt_at $d a a.1.tlog 8 >/dev/null || no "$name: site a never saved round 8's checkpoint"
        kill -KILL $PID_a
        wait $PID_a 2>/dev/null
        restore $d a "$d/$(basename "$ck")"
        start_ts $d a a.2.tlog --resume $d/run-a
        for s in $sites; do
            eval "await \$PID_$s 300"
            rc=$?
            [[ $rc -eq 0 ]] || { no "$name: site $s failed (rc $rc)"; tail -n 3 $d/$s.*.tlog | cut -c1-200; }
        done
        if th=$(same_theta $d $sites); then
            ok "$name: a restarted at round 8 from round 3's checkpoint: sites ($sites) end on theta $th"
        else
            no "$name: the sites end on different theta"
        fi
        grep -h "restarted:\|replaying\|as a pull\|checkpoint is at" $d/*.tlog | cut -c1-220 | head -8
        stale_check $d $T && ok "$name: no round committed twice, no silent wait" ||
            no "$name: a round committed twice or a silent wait"
    else
        no "$name: site a never saved round 3's checkpoint"
        for s in $sites; do eval "kill -KILL \$PID_$s" 2>/dev/null; done
    fi
done

# 3c: a and b restarted at round 8 from round 3's checkpoints while c is frozen
if want 3 || want 3c; then
d=3c
PORTS=($(port) $(port) $(port))
for s in a b c; do conf $d $s "a b c"; done
for s in a b c; do start_ts $d $s $s.1.tlog; done
cka=$(ckpt_at $d a a.1.tlog 3) && ckb=$(ckpt_at $d b b.1.tlog 3)
if [[ -n $cka && -n $ckb ]]; then
    mkdir -p $d/saved-a $d/saved-b
    cp -a "$cka" $d/saved-a/
    cp -a "$ckb" $d/saved-b/
    ckpt_at $d a a.1.tlog 8 >/dev/null || no "3c: site a never saved round 8's checkpoint"
    t0=$(date +%s.%N)
    kill -STOP $PID_c
    kill -KILL $PID_a $PID_b
    wait $PID_a $PID_b 2>/dev/null
    for s in a b; do restore $d $s "$d/saved-$s/$(basename "$cka")"; done
    for s in a b; do start_ts $d $s $s.2.tlog --resume $d/run-$s; done
    sleep $((3 * T))
    t1=$(date +%s.%N)
    kill -CONT $PID_c
    for s in a b c; do
        eval "await \$PID_$s 300"
        rc=$?
        [[ $rc -eq 0 ]] || { no "3c: site $s failed (rc $rc)"; tail -n 3 $d/$s.*.tlog | cut -c1-200; }
    done
    if th=$(same_theta $d a b c); then
        ok "3c: a and b restarted from round 3's checkpoints while c was frozen: all end on theta $th"
    else
        no "3c: the sites end on different theta"
    fi
    grep -h "restarted:\|replaying\|as a pull\|checkpoint is at" $d/*.tlog | cut -c1-220 | head -8
    stale_check $d $T c "$t0" "$t1" && ok "3c: no round committed twice, no silent wait" ||
        no "3c: a round committed twice or a silent wait"
else
    no "3c: no checkpoint of round 3"
    kill -KILL $PID_a $PID_b $PID_c 2>/dev/null
fi
fi
fi

# ---- 4. a sync source that serves less than it announced ---------------------------
if want 4; then
d=4
STEPS=80
H=5
EVERY=1
PORTS=($(port) $(port) $(port))
for s in a b c; do conf $d $s "a b c"; done
export AL_FAULT=badstate # a serves half of its state to every pull
start_ts $d a a.tlog
unset AL_FAULT
start_ts $d b b.1.tlog
start_ts $d c c.tlog
if ckpt_at $d b b.1.tlog 2 >/dev/null; then
    kill -KILL $PID_b
    wait $PID_b 2>/dev/null
    ckpt_at $d a a.tlog 5 >/dev/null || no "4: site a never reached round 5"
    t0=$(date +%s.%N)
    kill -STOP $PID_c # a is the only site ahead that b can reach
    start_ts $d b b.2.tlog --resume $d/run-b
    await_line $d/b.2.tlog "back to the round" 60 || no "4: b never went back to the round"
    t1=$(date +%s.%N)
    kill -CONT $PID_c
    for s in a b c; do
        eval "await \$PID_$s 300" || no "4: site $s did not finish"
    done
    th=$(same_theta $d a b c) && ok "4: b took c's state once c was back: all end on theta $th" ||
        no "4: the sites end on different theta"
    python3 - $d/b.2.tlog <<'EOF'
import re, sys
lines = [l.partition(" ") for l in open(sys.argv[1], errors="replace")]
lines = [(float(t), x) for t, _, x in lines if re.match(r"^[0-9.]+$", t)]
refused = [t for t, x in lines if "the state from a refused" in x]
short = [t for t, x in lines if "not this one again for this state" in x]
back = [(t, x) for t, x in lines if "back to the round" in x]
print("4: %d pulls from a refused, %d marked short, %d returns to the round" % (len(refused), len(short), len(back)))
if back:
    print("4: " + back[0][1].strip()[:200])
if not short or not back:
    print("FAIL-4: no refusal marked short, or no return to the round")
    sys.exit(1)
first, tb = short[0], back[0][0]
between = [t for t in refused if first <= t <= tb]
# refused once, then a is not asked again until b gives up, 5 heartbeats (1.25 s) on
if len(between) != 1 or not (1.2 <= tb - first <= 10) or "served less than announced: a" not in back[0][1]:
    print("FAIL-4: %d pulls from a before the return, %.2f s after the first" % (len(between), tb - first))
    sys.exit(1)
EOF
    [[ $? -eq 0 ]] && ok "4: a source that served half its state is not asked again; with no other, b goes back to the round after 5 heartbeats, saying so" ||
        no "4: the short source was asked again, or b never went back to the round"
    stale_check $d 2 c "$t0" "$t1" && ok "4: no round committed twice, no silent wait" ||
        no "4: a round committed twice or a silent wait"
else
    no "4: site b never saved round 2's checkpoint"
    kill -KILL $PID_a $PID_b $PID_c 2>/dev/null
fi
fi

al_test_end
