#!/usr/bin/env bash
# test_signals.sh AUTOLOCO -- a stop by signal in every phase of a site (issue
# 36): three sites a, b, c over mutual TLS on 127.0.0.1, [round] deadline_s =
# 30 s (so a stop that waited for the round's deadlines, as it did, takes a
# minute), heartbeat_s = 1 s. In each phase the stopped agents must exit 0
# within heartbeat_s + the time their save took (+ a margin for a loaded
# machine, far below the old minute), with the last committed state on disk:
# the stop's log line names the round saved (the one after the last commit
# the site logged, or the round it joined at) and θ_global's hash, which must
# be the last round record's; the newest checkpoint's agent.json holds that
# round. Phases (faults by AL_FAULT=pause:MOMENT:R, which SIGSTOPs a site at
# that moment, or by killing peers):
#   training    a paused halfway through round 3's interval; b and c wait
#               for its statistics; SIGTERM to a, SIGHUP to b, SIGINT to c
#   exchanging  a paused as round 3's exchange begins; b, c wait for its shards
#   voting      a paused once it voted in round 3; b and c commit without it
#   no quorum   b and c killed: a says "no quorum"; SIGTERM to a
#   joining     c alone, its peers not started yet
#   syncing     c starts late and pulls the state from a, which freezes while
#               serving it (AL_FAULT=pause:serve:any)
#   freeze      c frozen (SIGSTOP) until a and b finished the run, then SIGCONT
#               and SIGTERM
# And a freeze mid-run (issue 36): c stopped (SIGSTOP) for 20 s while a and b
# go on, then SIGCONT: it rejoins (a pull, as a restart does) and the three
# end on one theta; no log line repeats more than AL_LOG_BURST (3) times in 30
# s without the logger's "(repeated N times in T s)" summary.
# AL_TEST_PHASES="train rejoin" runs only those cases (train exchange vote
# noquorum join sync freeze rejoin); AL_TEST_KEEP=1 keeps the folder.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/shell_lib.sh"
al_test_start test-signals "${1:-}"
al_test_run_dir a,b,c

HB=1 # [round] heartbeat_s
# conf DIR: a.ini, b.ini, c.ini for three sites on fresh ports (STEPS, H)
conf() {
    local dir=$1 me s i
    local ports=($(port) $(port) $(port)) names=(a b c)
    mkdir -p "$dir"
    for me in a b c; do
        {
            echo "[site]"
            echo "name = $me"
            for i in 0 1 2; do [[ ${names[$i]} == "$me" ]] && echo "listen = 127.0.0.1:${ports[$i]}"; done
            echo "run_id = signals"
            echo "[peers]"
            for i in 0 1 2; do [[ ${names[$i]} != "$me" ]] && echo "${names[$i]} = 127.0.0.1:${ports[$i]}"; done
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
            echo "steps = ${STEPS:-4000}"
            echo "warmup = 5"
            echo "lr = 1e-2"
            echo "threads = 1"
            echo "eval_every = 0"
            echo "eval_batches = 2"
            echo "[outer]"
            echo "codec = int8+zstd"
            echo "[policy]"
            echo "name = fixed"
            echo "h_base = ${H:-20}"
            echo "[round]"
            echo "deadline_s = ${AL_TEST_DEADLINE:-30}"
            echo "heartbeat_s = $HB"
            echo "peer_timeout_s = 3"
            echo "quorum = majority"
            echo "[checkpoint]"
            echo "dir = $dir/run-$me"
            echo "every = 0"
            echo "keep = 3"
        } >"$dir/$me.ini"
    done
}

# wait_for FILE PATTERN SECONDS -- until the pattern is in the file
wait_for() {
    local i
    for ((i = 0; i < $3 * 20; i++)); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}
# stopped PID -- wait until the process is stopped (SIGSTOP: state T)
stopped() {
    local i
    for ((i = 0; i < 600; i++)); do
        [[ $(ps -o stat= -p "$1" 2>/dev/null) == T* ]] && return 0
        sleep 0.05
    done
    return 1
}
now() { date +%s.%N; }
want() { [[ -z ${AL_TEST_PHASES:-} || " $AL_TEST_PHASES " == *" $1 "* ]]; }

# check PHASE DIR SITE T0 STATUS -- the site's stop: status 0, within the
# bound, the saved round and theta its last commit's, on disk
check() {
    local phase=$1 dir=$2 s=$3 t0=$4 rc=$5 t1 log=$2/$3.log
    t1=$(now)
    local line
    line=$(grep -h "stopped: saved round" "$log" | tail -n 1)
    local why
    why=$(python3 - "$log" "$dir/run-$s" "$t0" "$t1" "$HB" "$line" 2>&1 <<'EOF'
import glob, json, os, re, sys
log, run, t0, t1, hb, line = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
m = re.search(r"saved round (\d+) \(theta ([0-9a-f]{12})\), step (\d+); ([0-9.]+) s after the signal \(save ([0-9.]+) s\)", line)
if not m:
    sys.exit("no 'stopped: saved round' line")
saved, theta, age, save = int(m[1]), m[2], float(m[4]), float(m[5])
# the last commit the site logged: a round line (round N -> N + 1 next), or a join
want, want_theta = 0, None
for l in open(log):
    r = re.search(r"\| round (\d+) \| .*\| theta ([0-9a-f]{12})", l)
    j = re.search(r"joined at round (\d+)", l)
    if r:
        want, want_theta = int(r[1]) + 1, r[2]
    elif j:
        want, want_theta = int(j[1]), None
if saved != want:
    sys.exit(f"saved round {saved}, the last commit logged makes it {want}")
if want_theta and theta != want_theta:
    sys.exit(f"saved theta {theta}, the last round's {want_theta}")
if want_theta:  # the round record of the event log holds the same theta
    recs = [json.loads(x) for x in open(os.path.join(run, "events.jsonl")) if '"event":"round"' in x.replace(" ", "")]
    if not recs or recs[-1]["theta"][:12] != theta or recs[-1]["round"] != saved - 1:
        sys.exit(f"events.jsonl's last round record {recs[-1] if recs else None} is not round {saved - 1}, theta {theta}")
ck = sorted(glob.glob(os.path.join(run, "step-*")))
if not ck:
    sys.exit("no checkpoint on disk")
got = json.load(open(os.path.join(ck[-1], "agent.json")))["round"]
if got != saved:
    sys.exit(f"the newest checkpoint {ck[-1]} holds round {got}, not {saved}")
# the bound: one heartbeat after the signal (the agent's clock), plus the save;
# the wall time adds the process's exit and this script's polling (a margin
# for a loaded machine: the old stop waited 2 deadlines + peer_timeout_s = 63 s)
if age > hb + save + 0.5:
    sys.exit(f"stopped {age:.2f} s after the signal: more than heartbeat_s {hb} + save {save:.2f} s")
wall = t1 - t0
if wall > hb + save + 4:
    sys.exit(f"exited {wall:.1f} s after the signal: more than heartbeat_s {hb} + save {save:.2f} s + 4 s")
print(f"exit 0 after {wall:.1f} s (stopped {age:.2f} s after the signal, save {save:.2f} s), saved round {saved}, theta {theta}")
EOF
    )
    local prc=$?
    if [[ $rc -eq 0 && $prc -eq 0 ]]; then
        ok "$phase: $s $why"
    else
        no "$phase: $s: status $rc; $why; $(grep -h 'stopping\|stopped\|error' "$log" | tail -n 3)"
    fi
}

# ---- training, exchanging, voting: a paused at a moment of round 3 ---------------
for moment in train exchange vote; do
    want $moment || continue
    case $moment in train) phase=training ;; exchange) phase=exchanging ;; vote) phase=voting ;; esac
    dir=$moment
    conf $dir
    AL_FAULT=pause:$moment:3 start $dir a
    start $dir b
    start $dir c
    stopped "$PID_a" || no "$phase: a never paused at $moment of round 3: $(tail -n 2 $dir/a.log)"
    sleep 1 # b and c are waiting for a (or, after a's vote, went on without it)
    sigs=(TERM TERM TERM)
    [[ $moment == train ]] && sigs=(TERM HUP INT)
    t0=$(now)
    kill -${sigs[0]} "$PID_a"
    kill -${sigs[1]} "$PID_b"
    kill -${sigs[2]} "$PID_c"
    kill -CONT "$PID_a"
    for s in a b c; do
        eval "p=\$PID_$s"
        await "$p" 40
        check "$phase" $dir $s "$t0" $?
    done
    grep -h "stopping (round" $dir/*.log | sed 's/^/  /'
done
want train && { grep -q "SIGHUP: stopping" train/b.log && grep -q "SIGINT: stopping" train/c.log &&
    ok "SIGHUP and SIGINT are logged and stop a site as SIGTERM does" ||
    no "SIGHUP/SIGINT not logged: $(grep -h 'stopping' train/b.log train/c.log)"
grep -q "round 3's interval stops after" train/a.log &&
    ok "training: a's interval was cut by the signal (saved as it stands)" ||
    no "training: a's interval was not cut: $(grep -h 'interval\|stopping' train/a.log | tail -n 2)"
}

# ---- no quorum: b and c killed ----------------------------------------------------
if want noquorum; then
dir=noquorum
conf $dir
start $dir a
start $dir b
start $dir c
wait_for $dir/a.log "| round 2 |" 60 || no "no quorum: no round 2"
kill -KILL "$PID_b" "$PID_c"
wait "$PID_b" "$PID_c" 2>/dev/null # (reaped here: no "Killed" line)
wait_for $dir/a.log "no quorum" 60 || no "no quorum: a never said so: $(tail -n 2 $dir/a.log)"
t0=$(now)
kill -TERM "$PID_a"
await "$PID_a" 40
check "no quorum" $dir a "$t0" $?
fi

# ---- joining: c alone ----------------------------------------------------------
if want join; then
dir=join
conf $dir
start $dir c
wait_for $dir/c.log "waiting for peers" 30 || sleep 2
t0=$(now)
kill -TERM "$PID_c"
await "$PID_c" 40
check "joining" $dir c "$t0" $?
fi

# ---- syncing: c pulls from a, which freezes serving it -----------------------------
if want sync; then
dir=sync
conf $dir
AL_FAULT=pause:serve:any start $dir a
AL_FAULT=pause:serve:any start $dir b
wait_for $dir/a.log "| round 2 |" 60 || no "syncing: no round 2"
start $dir c
if wait_for $dir/c.log "pulling the committed state" 60 && { stopped "$PID_a" || stopped "$PID_b"; }; then
    sleep 0.5
    t0=$(now)
    kill -TERM "$PID_c"
    await "$PID_c" 40
    check "syncing" $dir c "$t0" $?
    grep -q "stopping (round [0-9]*, sync)" $dir/c.log || no "syncing: c was not pulling at the signal: $(grep -h 'stopping (' $dir/c.log)"
else
    no "syncing: c never pulled from a frozen peer: $(tail -n 2 $dir/c.log)"
fi
kill -KILL "$PID_a" "$PID_b" 2>/dev/null
kill -CONT "$PID_a" "$PID_b" 2>/dev/null
wait "$PID_a" "$PID_b" 2>/dev/null
fi

# ---- after a freeze: c frozen while a and b finish ---------------------------------
if want freeze; then
dir=freeze
STEPS=300 conf $dir
start $dir a
start $dir b
start $dir c
wait_for $dir/c.log "| round 2 |" 60 || no "freeze: no round 2"
kill -STOP "$PID_c"
await "$PID_a" 120
ra=$?
await "$PID_b" 120
[[ $ra -eq 0 && $? -eq 0 ]] || no "freeze: a and b did not finish without c: $(tail -n 2 $dir/a.log)"
kill -CONT "$PID_c"
sleep 1
t0=$(now)
kill -TERM "$PID_c"
await "$PID_c" 40
check "after a freeze" $dir c "$t0" $?
# the start-up line says what runs; the summary line ends the run with
# theta_global's final eval loss (summary.json's, the last round line's eval),
# syncs, bytes and savings as summary.json has them
if why=$(python3 - $dir/a.log $dir/run-a/summary.json 2>&1 <<'EOF'
import json, re, sys
log, j = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
assert re.search(r"site a: runs: sites a,b,c; policy fixed, h_base 20; codec int8\+zstd; overlap none; "
                 r"quorum majority of 3; 1 worker\(s\); model tiny; data \S+ \(val \S+\); 300 steps; fresh start", log), "no start-up line"
s = re.search(r"site a: summary: theta_global eval loss ([0-9.]+); (\d+) rounds, (\d+) steps; syncs ([0-9.]+) "
              r"\(DiLoCo ([0-9.]+): the policy saved ([0-9.]+)%\); bytes sent (\d+), received (\d+) \(DiLoCo (\d+): "
              r"saved ([0-9.]+)% with the codec; DDP (\d+)\); theta ([0-9a-f]{12})", log)
assert s, "no summary line"
assert abs(float(s[1]) - j["final_eval_loss"]) < 6e-5, (s[1], j["final_eval_loss"])
assert (int(s[2]), int(s[3]), float(s[4]), int(s[7]), s[12]) == (j["rounds"], j["steps"], j["syncs"], round(j["bytes_sent"]), j["theta_hash"][:12]), s.groups()
ev = re.findall(r"\| loss [0-9.]+ \| eval ([0-9.]+) \|", log)
assert ev and ev[-1] == s[1], (ev[-1:], s[1])
print(f"eval {s[1]}, {s[2]} rounds, syncs {s[4]}, bytes sent {s[7]}")
EOF
); then
    ok "logs: a start-up line says what runs; the summary line has theta_global's eval loss and summary.json's counts ($why)"
else
    no "logs: start-up or summary line: $why"
fi
fi

# ---- a freeze mid-run: c stopped for 20 s, continued: it rejoins -------------------
if want rejoin; then
dir=rejoin
STEPS=${AL_TEST_REJOIN_STEPS:-3000} conf $dir
start $dir a
start $dir b
start $dir c
wait_for $dir/c.log "| round 2 |" 60 || no "rejoin: no round 2"
kill -STOP "$PID_c"
sleep 20
kill -CONT "$PID_c"
st=0
for s in a b c; do
    eval "p=\$PID_$s"
    await "$p" 600 || st=$?
done
ha=$(hash_of $dir/run-a/summary.json) hb=$(hash_of $dir/run-b/summary.json) hc=$(hash_of $dir/run-c/summary.json)
back=$(sed -n 's/.*| round \([0-9]*\) | .*| sites 3 |.*/\1/p' $dir/c.log | tail -n 1)
if [[ $st -eq 0 && -n $ha && $ha == "$hb" && $ha == "$hc" ]] && grep -q "joined at round" $dir/c.log && ((${back:-0} > 3)); then
    ok "rejoin: c frozen 20 s rejoined ($(grep -h 'joined at round' $dir/c.log | head -n 1 | sed 's/.*site c: //')) and committed with 3 sites up to round $back; all end on theta ${ha:0:12}"
else
    no "rejoin: status $st, theta a ${ha:0:12} b ${hb:0:12} c ${hc:0:12}, last 3-site round of c '$back': $(grep -h 'joined\|warn\|error' $dir/c.log | tail -n 4)"
fi
# no line more than 3 times in a 30-s window unsummarised (timestamps: UTC ms)
if python3 - $dir/a.log $dir/b.log $dir/c.log <<'EOF'
import collections, datetime, re, sys
bad = []
for f in sys.argv[1:]:
    seen = collections.defaultdict(list)
    for line in open(f):
        m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (.*)", line.rstrip("\n"))
        if not m:
            if line.startswith("["):
                bad.append(f"{f}: no timestamp: {line.strip()}")
            continue
        t = datetime.datetime.fromisoformat(m[1]).timestamp()
        if " (repeated " in m[2]:
            continue
        seen[m[2]].append(t)
    for text, ts in seen.items():
        for i in range(len(ts) - 3):
            if ts[i + 3] - ts[i] < 30:
                bad.append(f"{f}: {len(ts)} times: {text}")
                break
print("\n".join(bad[:6]))
sys.exit(1 if bad else 0)
EOF
then
    ok "rejoin: every log line has a timestamp; none repeats more than 3 times in 30 s unsummarised ($(cat $dir/*.log | grep -c 'repeated [0-9]* times') summaries)"
else
    no "rejoin: log lines repeat unsummarised (above)"
fi
fi

al_test_end
