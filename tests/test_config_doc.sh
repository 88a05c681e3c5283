#!/usr/bin/env bash
# test_config_doc.sh AUTOLOCO TEST_CONFIG_DOC DOCS/config.md -- docs/config.md is
# what `autoloco config doc --markdown` writes from the schema (regenerate it
# with that command after changing a key), and lists exactly the keys the
# parser accepts (test_config_doc.c); --help-config prints the same keys.
set -u
bin=${1:?} chk=${2:?} md=${3:?}
fail=0
if diff -u "$md" <("$bin" config doc --markdown); then
    echo "ok: docs/config.md is the schema's"
else
    echo "FAIL: docs/config.md differs from 'autoloco config doc --markdown' (regenerate it)"
    fail=1
fi
"$chk" "$md" || fail=1
# every command's --help-config is the same text, which names every section
t=$("$bin" train --help-config) s=$("$bin" sim --help-config) c=$("$bin" config doc)
missing=""
for sec in model data inner checkpoint site tls outer round sim wan dashboard log peers policy; do
    grep -q "^\[$sec\]" <<<"$t" || missing+=" [$sec]"
done
if [[ "$t" == "$s" && "$t" == "$c" && -z $missing ]]; then
    echo "ok: train --help-config = sim --help-config = config doc, every section"
else
    echo "FAIL: --help-config differs between commands or misses$missing"
    fail=1
fi
exit $fail
