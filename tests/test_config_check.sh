#!/usr/bin/env bash
# test_config_check.sh AUTOLOCO -- `autoloco config check` on the three
# sites of one run: ok on files like the ones `autoloco demo` writes (and it
# prints the run hash every site computes); then one change at a time, each
# refused with exit 1 and one "autoloco: error:" line that names the key
# and both values or the two files: a changed [policy] h_base, a missing
# [policy] key, [inner] lr, [site] run_id, a peer not listed back, a peer at
# the wrong port, a duplicate port, a certificate of another site, another CA,
# [checkpoint] every_steps in an agent's file, every and every_rounds apart.
set -u
bin=${1:?usage: test_config_check.sh path/to/autoloco}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d /tmp/al-test-config-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
no() { echo "FAIL: $*"; fail=$((fail + 1)); }
cd "$tmp" || exit 1
"$bin" certs --dir certs --sites a,b,c >/dev/null || { echo "FAIL: certs"; exit 1; }
"$bin" certs --dir other --sites a >/dev/null || { echo "FAIL: certs"; exit 1; }
: >train.bin
declare -A grpc=([a]=17071 [b]=17072 [c]=17073) dash=([a]=18081 [b]=18082 [c]=18083)
# site NAME [CERT]: the demo's layout (runtime/cli/cmd_demo.c write_config)
site() {
    local me=$1 cert=${2:-certs/$1}
    printf '[site]\nname = %s\nlisten = 127.0.0.1:%s\nrun_id = demo\n\n[peers]\n' "$me" "${grpc[$me]}"
    for p in a b c; do [[ $p != "$me" ]] && printf '%s = 127.0.0.1:%s\n' "$p" "${grpc[$p]}"; done
    printf '\n[tls]\nca = %s/certs/ca.pem\ncert = %s/%s.pem\nkey = %s/%s.key\n\n' "$tmp" "$tmp" "$cert" "$tmp" "$cert"
    printf '[model]\npreset = tiny\n\n[data]\ntrain = %s/train.bin\nval =\npacking = docs\n\n' "$tmp"
    printf '[inner]\nbatch = 4\nsteps = 100\nlr = 3e-3\nwarmup = 10\nthreads = 1\nseed = 1337\n\n'
    printf '[outer]\nlr = 0.7\nmomentum = 0.9\ncodec = int8+zstd\n\n'
    printf '[policy]\nname = autoloco\nh_base = 20\n\n[round]\ndeadline_s = 60\nquorum = majority\n\n'
    printf '[dashboard]\naddress = 127.0.0.1\nport = %s\n\n[checkpoint]\ndir = %s/site-%s\n' "${dash[$me]}" "$tmp" "$me"
}
fresh() { for s in a b c; do site $s >"site-$s.ini"; done; }

fresh
out=$("$bin" config check site-a.ini site-b.ini site-c.ini 2>&1)
rc=$?
if [[ $rc -eq 0 && $out == *"3 sites agree: run hash "* ]]; then ok "three sites agree: $(echo "$out" | tail -1)"; else no "three good sites: rc $rc: $out"; fi
[[ $(echo "$out" | grep -c ': ok (site ') -eq 3 ]] && ok "each file ok alone" || no "per-file lines: $out"
out1=$("$bin" config check site-b.ini 2>&1)
[[ $? -eq 0 && $out1 == "site-b.ini: ok (site b, 2 peer(s), config hash "* ]] && ok "one file: as before" || no "one file: $out1"

# refused STATUS-PATTERN DESCRIPTION: the last config check fails as wanted
refused() {
    local pat=$1 what=$2 err rc
    err=$("$bin" config check site-a.ini site-b.ini site-c.ini 2>&1 >/dev/null)
    rc=$?
    if [[ $rc -eq 1 && $(echo "$err" | wc -l) -eq 1 && $err == "autoloco: error: "* ]] && echo "$err" | grep -Eq "$pat"; then
        ok "$what: $err"
    else
        no "$what: rc $rc, want /$pat/: $err"
    fi
}
fresh; sed -i 's/^h_base = 20/h_base = 30/' site-c.ini
refused '\[policy\] h_base differs: site-a.ini has 20, site-c.ini has 30' "changed h_base"
fresh; sed -i '/^h_base = 20/d' site-b.ini
refused '\[policy\] h_base differs: site-a.ini has 20, site-b.ini has \(not set\)' "h_base missing in one"
fresh; sed -i 's/^lr = 3e-3/lr = 1e-3/' site-b.ini
refused '\[inner\] lr differs: site-a.ini has 0.003, site-b.ini has 0.001' "changed [inner] lr"
fresh; sed -i 's/^run_id = demo/run_id = other/' site-c.ini
refused '\[site\] run_id differs: site-a.ini has demo, site-c.ini has other' "changed run_id"
fresh; sed -i '/^a = 127.0.0.1/d' site-b.ini
refused 'site-a.ini lists b in \[peers\], but site-b.ini does not list a' "a peer not listed back"
fresh; sed -i "s/^c = 127.0.0.1:${grpc[c]}/c = 127.0.0.1:17999/" site-a.ini
refused "site-a.ini:[0-9]+: \[peers\] c = 127.0.0.1:17999, but site-c.ini has \[site\] listen = 127.0.0.1:${grpc[c]}" "a peer at the wrong port"
fresh; sed -i "s/^port = ${dash[b]}/port = ${grpc[a]}/" site-b.ini
refused "port ${grpc[a]} used twice on 127.0.0.1: site-a.ini: \[site\] listen = 127.0.0.1:${grpc[a]} and site-b.ini: \[dashboard\] port = ${grpc[a]}" "a port used twice"
fresh; site c certs/a >site-c.ini
refused "site-c.ini: \[tls\] cert: .*certs/a.pem names site 'a' \(its CN\), but \[site\] name = c" "another site's certificate"
fresh; sed -i "s#^ca = .*#ca = $tmp/other/ca.pem#" site-c.ini
refused '\[tls\] ca differs: site-a.ini has .*certs/ca.pem, site-c.ini has .*other/ca.pem' "another CA"
# [policy]'s keys in another order and a number spelt otherwise: the same run
# (a and b: h_base = 20 then h_min = 5; c: h_min = 5.0 then h_base = 2e1)
runhash() { "$bin" config check site-a.ini site-b.ini site-c.ini 2>&1 | sed -n 's/.*run hash \([0-9a-f]*\).*/\1/p' | tail -1; }
fresh
for s in a b c; do sed -i 's/^h_base = 20$/h_base = 20\nh_min = 5/' site-$s.ini; done
h0=$(runhash)
sed -i '/^h_base = 20$/d; /^h_min = 5$/d; s/^name = autoloco/name = autoloco\nh_min = 5.0\nh_base = 2e1/' site-c.ini
out=$("$bin" config check site-a.ini site-b.ini site-c.ini 2>&1)
rc=$?
h1=$(runhash)
if [[ $rc -eq 0 && -n $h1 && $h1 == "$h0" ]]; then ok "[policy] keys in another order, h_base spelt 2e1: the same run hash ($h1)"; else no "policy order: rc $rc, $h1 vs $h0: $out"; fi
fresh; sed -i 's/^name = b/name = a/' site-b.ini
refused 'site-b.ini' "two files for site a"
# [checkpoint]'s cadence: the agent counts committed rounds (every_rounds);
# every_steps (train's) is refused naming the key to use, and the older
# `every` beside every_rounds only when the two differ
fresh; for s in a b c; do printf 'every_rounds = 2\nevery = 2\n' >>site-$s.ini; done
"$bin" config check site-a.ini site-b.ini site-c.ini >/dev/null 2>&1 && ok "[checkpoint] every_rounds = 2 (every = 2 beside it): accepted" ||
    no "[checkpoint] every_rounds refused"
fresh; printf 'every_steps = 50\n' >>site-b.ini
refused 'site-b.ini: \[checkpoint\] every_steps = 50: the agent saves every N committed rounds, not inner steps: write every_rounds = N' "every_steps in an agent's file"
fresh; printf 'every = 2\nevery_rounds = 3\n' >>site-c.ini
refused 'site-c.ini: \[checkpoint\] every = 2 and every_rounds = 3: two cadences; keep every_rounds' "every and every_rounds differ"
# and train, which counts inner steps, refuses every_rounds the same way
printf '[model]\npreset = tiny\n[checkpoint]\ndir = %s/t\nevery_rounds = 2\n' "$tmp" >train.ini
err=$("$bin" train -c train.ini 2>&1 >/dev/null)
[[ $? -eq 1 && $err == "autoloco: error: [checkpoint] every_rounds = 2: train saves every N inner steps, not rounds: write every_steps = N" ]] &&
    ok "train refuses every_rounds: $err" || no "train with every_rounds: $err"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
