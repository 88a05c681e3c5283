#!/usr/bin/env bash
# test_certs.sh AUTOLOCO -- `autoloco certs` hands out one bundle per site
# and keeps the CA key apart: DIR/<site>/{ca.pem, <site>.pem, <site>.key}
# (key 0600, folder 0700), DIR/ca/{ca.pem, ca.key}, no CA key in any site's
# bundle, each site certificate verifies against its bundle's CA with CN =
# site; the flat DIR/*.pem, *.key that one-machine runs use stay; a site
# added later gets a bundle from the same CA; nothing is overwritten.
set -u
bin=${1:?usage: test_certs.sh path/to/autoloco}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d /tmp/al-test-certs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
no() { echo "FAIL: $*"; fail=$((fail + 1)); }
cd "$tmp" || exit 1
mode() { stat -c %a "$1" 2>/dev/null; }

out=$("$bin" certs --dir run --sites a,b,c) || no "certs --dir run --sites a,b,c"
[[ $out == *"run/a/  -> datacenter a only"* && $out == *"run/ca/  -> the CA key"* ]] &&
    ok "certs says what goes where" || no "certs output: $out"
for s in a b c; do
    files=$(cd "run/$s" && ls | tr '\n' ' ')
    [[ $files == "$s.key $s.pem ca.pem " ]] && ok "run/$s/ holds: $files" || no "run/$s/ holds: $files"
    [[ $(mode "run/$s") == 700 && $(mode "run/$s/$s.key") == 600 ]] &&
        ok "run/$s/ is 0700, its key 0600" || no "modes: run/$s $(mode "run/$s"), key $(mode "run/$s/$s.key")"
    if openssl verify -CAfile "run/$s/ca.pem" "run/$s/$s.pem" >/dev/null 2>&1; then
        ok "run/$s/$s.pem verifies against run/$s/ca.pem"
    else
        no "run/$s/$s.pem does not verify"
    fi
    cn=$(openssl x509 -in "run/$s/$s.pem" -noout -subject -nameopt multiline | awk -F' = ' '/commonName/ {print $2}')
    [[ $cn == "$s" ]] && ok "CN of run/$s/$s.pem is $s" || no "CN '$cn'"
    # the key belongs to the certificate
    if [[ $(openssl pkey -in "run/$s/$s.key" -pubout 2>/dev/null) == "$(openssl x509 -in "run/$s/$s.pem" -noout -pubkey)" ]]; then
        ok "run/$s/$s.key matches its certificate"
    else
        no "run/$s/$s.key does not match run/$s/$s.pem"
    fi
    cmp -s "run/$s/$s.key" "run/$s.key" && cmp -s "run/$s/ca.pem" run/ca.pem &&
        ok "the flat run/$s.key and run/ca.pem are the same files" || no "flat files differ from the bundle"
done
leak=""
for f in run/a/* run/b/* run/c/*; do cmp -s "$f" run/ca/ca.key && leak+=" $f"; done
[[ -z $leak ]] && ok "no site bundle holds the CA key" || no "the CA key is in:$leak"
cmp -s run/ca/ca.key run/ca.key && [[ $(mode run/ca) == 700 && $(mode run/ca/ca.key) == 600 ]] &&
    ok "run/ca/ca.key apart (0700 folder, 0600 key)" || no "run/ca/: $(ls -l run/ca)"

# a site added later: same CA, its own bundle, run/ca/ untouched
sum=$(sha256sum run/ca/ca.key)
"$bin" certs --dir run --sites d >/dev/null || no "certs --sites d"
openssl verify -CAfile run/a/ca.pem run/d/d.pem >/dev/null 2>&1 &&
    ok "a site added later (d) is signed by the same CA" || no "run/d/d.pem does not verify against a's CA"
[[ $(sha256sum run/ca/ca.key) == "$sum" ]] && ok "run/ca/ca.key unchanged" || no "run/ca/ca.key changed"
# never overwritten
err=$("$bin" certs --dir run --sites b 2>&1 >/dev/null)
[[ $? -eq 1 && $err == *"refusing to overwrite"* ]] && ok "an existing site is refused: $err" || no "re-creating b: $err"
err=$("$bin" certs --dir run --sites ca 2>&1 >/dev/null)
[[ $? -eq 1 && $err == *"'ca' is not a usable site name"* ]] && ok "site name 'ca' refused" || no "site 'ca': $err"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
