#!/bin/sh
# The web console's memory cost on a node of a testnet with a sink
# (docs/console.md, "Numbers"): its network page reads the sink's change
# log while it is open. Starts `micra testnet up` (4 crawlers, a sink,
# 200 hosts × 10 pages), seeds every host through node 0 and lets the
# crawl finish, then takes node 0's RSS as rss.sh does: no page open; the
# node and network pages open in two headless Chromiums; closed again.
# Usage: node/console/rss-testnet.sh [SECONDS per phase (default 60)]
# [none: no browser in the middle phase]. Needs chromium and go.
set -eu
secs=${1:-60}
control=${2:-}
browser=${MICRA_CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome)}
dir=$(mktemp -d)
b1= b2= tn=
trap '[ -n "$b1$b2" ] && kill $b1 $b2 2>/dev/null; [ -n "$tn" ] && "$dir/micra" testnet down --dir "$dir/tn" >/dev/null 2>&1; wait 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
go build -o "$dir/micra" ./cmd/micra
"$dir/micra" testnet up --dir "$dir/tn" -n 4 --hosts 200 --pages-per-host 10 >"$dir/up.log" 2>&1 &
tn=$!
while [ ! -s "$dir/tn/testnet.json" ]; do sleep 0.5; done
api=$(cat "$dir/tn/nodes/00/data/api")
node=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['nodes'][0]['pid'])" "$dir/tn/testnet.json")
"$dir/micra" seed --api "$api" --file "$dir/tn/seeds.txt" >/dev/null
# the crawl caught up: node 0 says so twice in a row
ok=0
while [ $ok -lt 2 ]; do
	sleep 2
	if curl -s "$api/v1/status" | grep -q '"caught_up": true'; then ok=$((ok + 1)); else ok=0; fi
done
rss() {
	for _ in $(seq "$secs"); do awk '/^VmRSS/ {print $2}' "/proc/$node/status"; sleep 1; done | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
heap() { curl -s "$api/metrics" | awk '/^go_memstats_heap_inuse_bytes/ {printf "%d", $2/1024}'; }
sleep 10
closed=$(rss); closed_heap=$(heap)
if [ "$control" = none ]; then
	sleep 5
	open=$(rss); open_heap=$(heap)
else
	"$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$dir/b1" "$api/console/node" >/dev/null 2>&1 &
	b1=$!
	"$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$dir/b2" "$api/console/network" >/dev/null 2>&1 &
	b2=$!
	sleep 5
	open=$(rss); open_heap=$(heap)
	hosts=$(curl -s "$api/console/network.json" | python3 -c "import json,sys; v=json.load(sys.stdin); f=v['figures']; print(len(v['hosts']), 'hosts,', f['pages'], 'pages read from the sink; at nearest', f.get('optimal_pct'), '%, probes/URL', f.get('probes_per_url'), ', coverage', f.get('coverage_pct'), '%')")
	kill $b1 $b2; wait $b1 $b2 2>/dev/null || true
	b1= b2=
	echo "network page: $hosts"
fi
after=$(rss); after_heap=$(heap)
[ "$control" = none ] && echo "(control run: no browser opened in the middle phase)"
echo "node 0 RSS (median of $secs s, kB): no page $closed; node+network pages open $open (+$((open - closed))); closed again $after (+$((after - closed)))"
echo "Go heap in use (kB):               no page $closed_heap; pages open $open_heap; closed again $after_heap"
