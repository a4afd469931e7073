#!/usr/bin/env python3
"""Reads the CSV of a traced decode step (a build with -DSTRATA_CUDA_STEP_TRACE=ON, run with
STRATA_CUDA_STEP_TRACE=N; src/backend/cuda/launch.cuh) and prints the step's kernels in order, with
when each one's blocks arrived at their PDL wait and when the wait released them, then the mean of
each op over the layers.

  scripts/cuda/step_trace.py FILE [OPS_PER_LAYER]      e.g. 5: QKV, attention, O, gate/up, down

A kernel's records follow its predecessor's (its waits return once the predecessor has completed), so
a kernel instance is a run of records with the same grid and block size, at most one per block.
"release" is the first release of an instance's blocks; "to next" is the time from it to the next
instance's release: that kernel's share of the step's critical path. "early" counts the blocks that
arrived at the wait before the release (they had loaded what they may load before it, e.g. weights).
Phase stamps (step_trace_stamp) are reported in us after their instance's release.
"""
import csv
import statistics as st
import sys


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    recs = []
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            recs.append((int(r['t_arrive']), int(r['t_release']), int(r['grid']), int(r['block']), int(r['threads']),
                         int(r['smid'])))
    if not recs:
        print("no records", file=sys.stderr)
        return 1
    inst = []
    for r in recs:
        if r[2] >= 900000:  # a phase stamp of the current instance
            if inst:
                inst[-1]['stamps'].append(r)
            continue
        key = (r[2], r[4])
        if inst and inst[-1]['key'] == key and len(inst[-1]['recs']) < r[2]:
            inst[-1]['recs'].append(r)
        else:
            inst.append({'key': key, 'recs': [r], 'stamps': []})
    t0 = min(r[1] for r in recs if r[2] < 900000)
    out = []
    for k, i in enumerate(inst):
        rel = min(r[1] for r in i['recs'])
        ph = {}
        for r in i['stamps']:
            ph.setdefault(r[2] - 900000, []).append((r[0] - rel) / 1e3)
        out.append(dict(grid=i['key'][0], threads=i['key'][1], n=len(i['recs']), rel=(rel - t0) / 1e3,
                        arr=(min(r[0] for r in i['recs']) - t0) / 1e3,
                        last=(max(r[1] for r in i['recs']) - t0) / 1e3,
                        early=sum(1 for r in i['recs'] if r[0] < rel - 50), sms=len(set(r[5] for r in i['recs'])),
                        ph={p: (st.median(v), min(v), max(v)) for p, v in ph.items()}))
    for a, b in zip(out, out[1:]):
        a['dt'] = b['rel'] - a['rel']
    out[-1]['dt'] = float('nan')
    print(f"{len(recs)} records, {len(out)} kernel instances, releases span {out[-1]['rel']:.1f} us")
    print("  k   grid  thr blocks  SMs early first_arrive release last_release to_next (us)")
    for k, o in enumerate(out):
        print(f"{k:3d} {o['grid']:6d} {o['threads']:4d} {o['n']:6d} {o['sms']:4d} {o['early']:5d} {o['arr']:12.2f} "
              f"{o['rel']:7.2f} {o['last']:12.2f} {o['dt']:7.2f}")
    if len(sys.argv) < 3:
        return 0
    P = int(sys.argv[2])
    shapes = [(o['grid'], o['threads']) for o in out]
    for s0 in range(len(out)):
        reps = 0
        while s0 + (reps + 1) * P <= len(out) and shapes[s0 + reps * P:s0 + (reps + 1) * P] == shapes[s0:s0 + P]:
            reps += 1
        if reps >= 3:
            break
    else:
        print(f"no pattern of {P} kernels repeats 3 times", file=sys.stderr)
        return 1
    layers = range(1, reps)  # the first layer's predecessors differ (embedding, first norm)
    print(f"\nlayers: instances {s0}.. , {reps} repeats of {P}; means over layers 2..{reps}")
    print(" op   grid  thr  to_next (mean, min, max)  early blocks")
    total = 0.0
    for j in range(P):
        d = [out[s0 + r * P + j]['dt'] for r in layers]
        d = [x for x in d if x == x]
        e = [out[s0 + r * P + j]['early'] for r in layers]
        total += st.mean(d)
        print(f"{j:3d} {shapes[s0 + j][0]:6d} {shapes[s0 + j][1]:4d} {st.mean(d):7.2f} {min(d):6.2f} {max(d):6.2f}"
              f"   {st.mean(e):6.1f} of {out[s0 + j]['n']}")
    print(f"a layer: {total:.2f} us")
    stamped = [j for j in range(P) if any(out[s0 + r * P + j]['ph'] for r in layers)]
    if stamped:
        print("\nphases, us after the op's release (means over layers of the median, first and last block)")
        for j in stamped:
            for p in sorted(set(p for r in layers for p in out[s0 + r * P + j]['ph'])):
                v = [out[s0 + r * P + j]['ph'][p] for r in layers if p in out[s0 + r * P + j]['ph']]
                print(f"  op {j} phase {p:2d}: {st.mean(x[0] for x in v):6.2f}  ({st.mean(x[1] for x in v):.2f} .. "
                      f"{st.mean(x[2] for x in v):.2f})")
    return 0


if __name__ == '__main__':
    sys.exit(main())
