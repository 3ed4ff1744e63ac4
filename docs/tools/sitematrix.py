#!/usr/bin/env python3
"""Synthetic measured-latency matrices for `micra sim --sites/--rtt` (docs/delegation.md).

Two kinds of site placement, RTT = great-circle km / 100 (fibre, both ways) x a per-pair
log-normal stretch (median 2) + 1-10 ms of per-pair noise; about 10 % of pairs left out
(the simulator's formula fills them):

  sitematrix.py uniform OUT_DIR [--asym]  250 sites uniform over the globe
  sitematrix.py pop OUT_DIR               248 sites clustered around 23 metro regions

--asym draws each direction separately (real RTTs are near-symmetric). Deterministic.
"""
import math
import os
import random
import sys

METROS = [(40.7, -74, 25), (34, -118, 15), (41.8, -87.6, 12), (37.7, -122.4, 12), (51.5, 0, 20),
          (48.8, 2.3, 15), (50.1, 8.7, 15), (52.5, 13.4, 10), (35.7, 139.7, 15), (37.5, 127, 10),
          (31.2, 121.5, 15), (22.3, 114.2, 10), (1.3, 103.8, 8), (19, 72.8, 10), (28.6, 77.2, 8),
          (-23.5, -46.6, 10), (-33.9, 151.2, 6), (55.7, 37.6, 8), (6.5, 3.4, 4), (-26.2, 28, 4),
          (30, 31.2, 4), (19.4, -99.1, 6), (43.7, -79.4, 6)]


def great_circle_km(a, b):
    p1, p2 = math.radians(a[1]), math.radians(b[1])
    dl = math.radians(b[2] - a[2])
    h = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371 * math.asin(min(1, math.sqrt(h)))


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("uniform", "pop"):
        sys.exit(__doc__)
    kind, out, asym = sys.argv[1], sys.argv[2], "--asym" in sys.argv[3:]
    rng = random.Random(7 if kind == "uniform" else 11)
    sites = []
    if kind == "uniform":
        for i in range(250):
            sites.append((f"s{i}", math.degrees(math.asin(2 * rng.random() - 1)) * 0.8, rng.random() * 360 - 180))
    else:
        for k, (lat, lon, n) in enumerate(METROS):
            for i in range(n):
                sites.append((f"m{k}_{i}", lat + rng.gauss(0, 3), lon + rng.gauss(0, 4)))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "sites.csv"), "w") as f:
        f.write("id,lat,lon\n")
        for s in sites:
            f.write(f"{s[0]},{s[1]:.4f},{s[2]:.4f}\n")
    with open(os.path.join(out, "rtt.csv"), "w") as f:
        f.write("src,dst,rtt_ms\n")
        for i, a in enumerate(sites):
            for j, b in enumerate(sites):
                if i == j or (not asym and j < i) or rng.random() < 0.1:
                    continue
                rtt = great_circle_km(a, b) / 100 * rng.lognormvariate(math.log(2), 0.35) + rng.uniform(1, 10)
                f.write(f"{a[0]},{b[0]},{rtt:.3f}\n")


if __name__ == "__main__":
    main()
