#!/bin/sh
# The web console's memory cost (docs/console.md, "Numbers"): the RSS of
# one `micra node` with no console page open, then with the node and
# network pages open in headless Chromium (live by Server-Sent Events),
# then after they close. Usage: node/console/rss.sh [SECONDS per phase
# (default 60)] [none: the same phases with no browser, to see how much the
# node grows by itself meanwhile]. Needs chromium (or $MICRA_CHROMIUM) and go.
set -eu
secs=${1:-60}
control=${2:-}
browser=${MICRA_CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome)}
dir=$(mktemp -d)
b1= b2=
trap 'kill $node $b1 $b2 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
go build -o "$dir/micra" ./cmd/micra
"$dir/micra" node --data-dir "$dir/data" --testnet --listen /ip4/127.0.0.1/tcp/0 --crawler-addr 1.1.1.1 \
	--api 127.0.0.1:0 >"$dir/node.log" 2>&1 &
node=$!
while [ ! -s "$dir/data/api" ]; do sleep 0.2; done
api=$(cat "$dir/data/api")
# kB of resident memory: the median of one sample a second over the phase
rss() {
	for _ in $(seq "$secs"); do awk '/^VmRSS/ {print $2}' "/proc/$node/status"; sleep 1; done | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
heap() { curl -s "$api/metrics" | awk '/^go_memstats_heap_inuse_bytes/ {printf "%d", $2/1024}'; }
sleep 10 # (startup settles)
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
	kill $b1 $b2; wait $b1 $b2 2>/dev/null || true
	b1= b2=
fi
after=$(rss); after_heap=$(heap)
[ "$control" = none ] && echo "(control run: no browser opened in the middle phase)"
echo "node RSS (median of $secs s, kB): no page $closed; node+network pages open $open (+$((open - closed))); closed again $after (+$((after - closed)))"
echo "Go heap in use (kB):              no page $closed_heap; pages open $open_heap; closed again $after_heap"
