# shell_lib.sh -- the common start of the shell tests that run agents, sourced:
#   . "$(dirname "$0")/shell_lib.sh"; al_test_start NAME "$1"
# sets bin (the autoloco binary, absolute), tmp (a fresh folder under /tmp,
# removed at exit unless AL_TEST_KEEP is set), pids (processes killed at exit:
# append yours), and the counters behind ok/no; the caller ends with al_test_end.
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
