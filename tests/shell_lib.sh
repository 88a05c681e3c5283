# shell_lib.sh -- the common start of the shell tests that run agents, sourced:
#   . "$(dirname "$0")/shell_lib.sh"; al_test_start NAME "$1"
# sets bin (the autoloco binary, absolute), tmp (a fresh folder under /tmp,
# removed at exit unless AL_TEST_KEEP is set), pids (processes killed at exit:
# append yours), and the counters behind ok/no; the caller ends with al_test_end.
# start, await and hash_of (below) start agents, wait for them, read their hash.
# port prints a free port for an agent to listen on (free_port.py: below the
# kernel's ephemeral range, which other tests' connections draw from).
al_lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
port() { python3 "$al_lib_dir/free_port.py"; }
al_test_start() {
    set -u
    bin=${2:?usage: $1.sh path/to/autoloco}
    bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
    tmp=$(mktemp -d "/tmp/al-$1.XXXXXX")
    pids=()
    trap al_test_cleanup EXIT
    pass=0
    fail=0
}
al_test_cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    if [[ -n ${AL_TEST_KEEP:-} ]]; then echo "kept: $tmp" >&2; else rm -rf "$tmp"; fi
}
ok() { echo "ok: $*"; pass=$((pass + 1)); }
no() { echo "FAIL: $*"; fail=$((fail + 1)); }
# the closing line meson's log and the CI read; the exit status says it all
al_test_end() {
    echo "$pass passed, $fail failed"
    [[ $fail -eq 0 ]]
}

# al_test_run_dir SITES -- in $tmp: data/ (400 fortunes of one pattern,
# prepared) and certs/ for SITES (comma-separated), the folder every
# multi-agent shell test starts from; exits the test on a failure
al_test_run_dir() {
    local i
    cd "$tmp" || exit 1
    mkdir in
    for i in $(seq 1 400); do
        printf 'fortune %d: the quick brown fox %d jumps over the lazy dog %d times\n%%\n' "$i" $((i * 7)) $((i % 13))
    done >in/f
    "$bin" data prep --format fortune -o data in >/dev/null || { echo "FAIL: data prep"; exit 1; }
    "$bin" certs --dir certs --sites "$1" >/dev/null || { echo "FAIL: certs"; exit 1; }
}

# The agents a test starts (tests/test_agent.sh, test_durable.sh):
# start DIR SITE [ARGS...] -- an agent in the background, its log in DIR/SITE.log
start() {
    local dir=$1 me=$2
    shift 2
    "$bin" agent -c "$dir/$me.ini" "$@" >>"$dir/$me.log" 2>&1 &
    pids+=($!)
    eval "PID_$me=$!"
}

# await PID SECONDS -- wait for a process, at most SECONDS; its exit status
await() {
    local p=$1 t=$2 i
    for ((i = 0; i < t * 10; i++)); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$p" 2>/dev/null; then
        kill -KILL "$p"
        wait "$p" 2>/dev/null
        return 124
    fi
    wait "$p"
}

# theta_global's hash in a run's summary.json
hash_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["theta_hash"])' "$1" 2>/dev/null; }
