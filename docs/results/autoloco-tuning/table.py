#!/usr/bin/env python3
"""Writes README.md of this folder from its JSON records (run from this folder)."""
import glob
import importlib.machinery
import importlib.util
import json

loader = importlib.machinery.SourceFileLoader('sweep', '../../../tools/sweep')
spec = importlib.util.spec_from_loader('sweep', loader)
sw = importlib.util.module_from_spec(spec)
loader.exec_module(sw)
recs = [json.load(open(f)) for f in sorted(glob.glob('*.json'))]
out = ["# Tuning runs of the drift rule (seed 101; not report seeds)", "",
       "`autoloco sim` runs on tuning seed 101 (the report seeds are 1–5) in the regime of",
       "docs/results/autoloco-sweep.md (`demo`, 4 sites, 3000 steps, 8 × 64 tokens, lr 3e-3,",
       "warmup 150, cosine to 3e-4). One JSON file per run with its command (`cmd`); `table.py`",
       "writes this page. Tags: `dlH` DiLoCo H (no correction); `fcH` fixed H with the correction",
       "(s_ref = h_base = 100); `fcHs` / `fc100sref25`: the correction with `[outer] s_ref = 25`,",
       "`s50`: 50; `al8` the drift rule with cap 8, `cap2` cap 2 (`cap2s`: with s_ref 25), `p1`",
       "power 1; `early200` / `late200`: `schedule` 200 then 67 at step 1500 / 67 then 200",
       "(`late200s`: with s_ref 25).", "",
       "'front' here: the envelope of this seed's fixed-H runs at the default correction (dlH, fcH",
       "without s_ref); 'saving' = 1 − syncs / the syncs that front needs for the run's loss.", ""]
for sc in ['iid', 'noniid', 'shift']:
    fixed = [r for r in recs if r['scenario'] == sc and
             (r['tag'].startswith('dl') or (r['tag'].startswith('fc') and 's' not in r['tag'][2:]))]
    env = sw.envelope([(r['syncs'], r['final_eval_loss']) for r in fixed])
    out += [f"## `{sc}`", "", "| run | syncs | final eval loss | front syncs | saving | H history |",
            "|---|---:|---:|---:|---:|---|"]
    for r in sorted([r for r in recs if r['scenario'] == sc], key=lambda r: -r['syncs']):
        fs = sw.front_syncs_at(env, r['final_eval_loss'])
        sav = '—' if fs is None else f"{100 * (1 - r['syncs'] / fs):.0f}%"
        hh = r['h_history']
        hs = f"{hh[0]} × {len(hh)}" if len(set(hh)) == 1 or len(hh) > 32 else ' '.join(map(str, hh))
        out.append(f"| `{r['tag']}` | {r['syncs']} | {r['final_eval_loss']:.4f} | "
                   f"{'—' if fs is None else f'{fs:.1f}'} | {sav} | {hs} |")
    out.append("")
open('README.md', 'w').write("\n".join(out))
