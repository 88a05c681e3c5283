#!/usr/bin/env bash
# test_sim_compare.sh AUTOLOCO -- `autoloco sim --compare A B --seeds 3` (issue 36):
# a progress line per run, the per-seed table and a verdict line; each run is
# the plain `autoloco sim` run with that policy and seed (same final θ hash and
# loss: the simulator is deterministic); the JSON's mean and spread are those
# of the per-seed differences; bad specs are refused before any run.
set -u
bin=${1:?usage: test_sim_compare.sh path/to/autoloco}
tmp=$(mktemp -d /tmp/al-test-sim-compare.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

mkdir -p "$tmp/in"
for i in $(seq 1 300); do
    printf 'fortune %d: the quick brown fox jumps over %d lazy dogs\n%%\n' "$i" $((i * 3))
done >"$tmp/in/fort"
"$bin" data prep --format fortune -o "$tmp/data" "$tmp/in" >/dev/null || exit 1
common=(--set data.train="$tmp/data/train.bin" --set data.val="$tmp/data/val.bin" --steps 24
    --sites 2 --set policy.h_base=4 --set inner.batch=4 --seed 7)

out=$("$bin" sim "${common[@]}" --compare fixed:h=6 autoloco --seeds 3 --json 2>&1)
rc=$?
echo "$out"
[[ $rc -eq 0 ]] && ok "sim --compare exits 0" || bad "sim --compare -> exit $rc"
[[ $(grep -c '^\[[1-6]/6\] seed ' <<<"$out") -eq 6 ]] && ok "six progress lines" ||
    bad "progress lines"
grep -qE '^verdict: (A saves|B saves|no difference detectable with 3 seeds|A is better|B is better|trade-off)' <<<"$out" &&
    ok "verdict: $(grep '^verdict' <<<"$out")" || bad "no verdict line"
last=$(tail -n 1 <<<"$out")
if python3 - "$last" <<'PY'; then ok "the JSON's mean and std are the per-seed differences'"; else bad "JSON: $last"; fi
import json, statistics, sys
d = json.loads(sys.argv[1])
diffs = [s["loss_a"] - s["loss_b"] for s in d["seeds"]]
assert [s["seed"] for s in d["seeds"]] == [7, 8, 9], d["seeds"]
assert abs(d["mean_diff"] - statistics.fmean(diffs)) < 1e-12
assert abs(d["std"] - statistics.stdev(diffs)) < 1e-12
assert abs(d["half_width"] - 4.303 * d["std"] / 3 ** 0.5) < 1e-12
PY
# seed 8, A and B, against separate runs
for side in A B; do
    if [[ $side == A ]]; then pol=(--policy fixed --h 6); else pol=(--policy autoloco); fi
    one=$("$bin" sim "${common[@]}" "${pol[@]}" --seed 8 --json)
    h=$(grep -o 'theta_global sha256 [0-9a-f]*' <<<"$one" | cut -d' ' -f3)
    line=$(grep "seed 8 $side " <<<"$out")
    if [[ -n $h && $line == *"theta ${h:0:16}"* ]] &&
        python3 -c 'import json,sys; l=float(sys.argv[2].split("final eval loss ")[1].split(",")[0]); assert abs(json.loads(sys.argv[1])["final_eval_loss"]-l) < 5e-7' "$(tail -n 1 <<<"$one")" "$line"; then
        ok "seed 8 $side = autoloco sim ${pol[*]} --seed 8 (theta ${h:0:16})"
    else
        bad "seed 8 $side: '$line' vs $h"
    fi
done
err=$("$bin" sim "${common[@]}" --compare fixed:h=soon autoloco 2>&1)
[[ $? -eq 1 && $err == *"--compare 'fixed:h=soon'"* && $err != *"[1/"* ]] && ok "bad spec: $err" ||
    bad "bad spec: $err"
err=$("$bin" sim "${common[@]}" --compare fixed 2>&1)
[[ $? -eq 1 && $err == *"needs two runs"* ]] && ok "one spec: $err" || bad "one spec: $err"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
